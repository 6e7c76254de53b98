package vm

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestHostDebianMirror(t *testing.T) {
	for _, tt := range []struct {
		name, list, sources string
		archive, security   string
		skip                bool
	}{
		{name: "deb822, the archive and its security archive",
			sources: "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n\nTypes: deb\nURIs: http://sec.example/debian-security/\nSuites: bookworm-security\n",
			archive: "http://mirror.example/debian", security: "http://sec.example/debian-security"},
		{name: "one-line with options; security on the archive's host by default",
			list:    "# a comment\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n",
			archive: "http://mirror.example/debian", security: "http://mirror.example/debian-security"},
		{name: "other archives are not Debian's",
			list:    "deb https://apt.example/node_20.x nodistro main\ndeb http://m.example/debian trixie main\n",
			archive: "http://m.example/debian", security: "http://m.example/debian-security"},
		{name: "no Debian archive: skip with the reason", list: "deb https://apt.example/x stable main\n", skip: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.list != "" {
				if err := os.WriteFile(filepath.Join(dir, "sources.list"), []byte(tt.list), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tt.sources != "" {
				if err := os.WriteFile(filepath.Join(dir, "sources.list.d", "debian.sources"), []byte(tt.sources), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// A disabled file is not read.
			if err := os.WriteFile(filepath.Join(dir, "sources.list.d", "x.list.disabled"), []byte("deb http://wrong.example/debian bookworm main\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			a, s, err := hostDebianMirror(dir)
			var skip ErrSkip
			if tt.skip {
				if !errors.As(err, &skip) {
					t.Fatalf("err %v, want a skip", err)
				}
				return
			}
			if err != nil || a != tt.archive || s != tt.security {
				t.Errorf("got %q %q %v, want %q %q", a, s, err, tt.archive, tt.security)
			}
		})
	}
}
