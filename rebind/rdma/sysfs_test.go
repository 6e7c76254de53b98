package rdma

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sysfsTree builds a sysfs fixture under a temp dir: files (relative path →
// contents) and symlinks (relative path → relative target).
func sysfsTree(t *testing.T, files, links map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, v := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestParseGUID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]uint64{
		"80dd:69ff:fe0d:1e0b": 0x80dd69fffe0d1e0b,
		"0000:0000:0000:0001": 1,
	} {
		got, err := ParseGUID(in)
		if err != nil || got != want {
			t.Errorf("ParseGUID(%q) = %#x, %v; want %#x", in, got, err, want)
		}
		if f := FormatGUID(want); f != in {
			t.Errorf("FormatGUID(%#x) = %q, want %q", want, f, in)
		}
	}
	for _, in := range []string{"", "80dd:69ff:fe0d", "80dd:69ff:fe0d:1e0b:0000", "80dd:69ff:fe0d:1e0", "+0dd:69ff:fe0d:1e0b", "80dd:69ff:fe0d:1e0g"} {
		if _, err := ParseGUID(in); err == nil {
			t.Errorf("ParseGUID(%q): no error", in)
		}
	}
}
