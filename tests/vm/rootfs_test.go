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

// Each image of the systemd test boots a kernel the harness can fetch and
// runs Debian's nvmetcli (testing's own; the others' from testing).
func TestDebianReleases(t *testing.T) {
	t.Setenv("NVMET_REBIND_VM_CACHE", t.TempDir())
	names := map[string]bool{}
	for _, r := range DebianReleases {
		if names[r.Name] {
			t.Errorf("%s: two images of that name", r.Name)
		}
		names[r.Name] = true
		if _, err := KernelApt(r.Kernel); err != nil {
			t.Errorf("%s: kernel %q: %v", r.Name, r.Kernel, err)
		}
		if !r.Nvmetcli() {
			t.Errorf("%s: no nvmetcli", r.Name)
		}
		if (r.Codename == testingCodename) != (len(r.FromTesting) == 0) {
			t.Errorf("%s: FromTesting %v", r.Name, r.FromTesting)
		}
	}
	a, err := KernelApt(TestingSeries)
	if err != nil || !a.Private() || len(a.Suites) != 1 || a.Suites[0] != "forky" {
		t.Errorf("%s: %v %v, want the private apt of forky", TestingSeries, a, err)
	}
	// forky's own kernels are +deb14; a trixie-backports one in the same
	// listing is not testing's.
	listing := "linux-image-7.2.12+deb14-amd64 - Linux 7.2.12\nlinux-image-7.2.9+deb14-amd64 - Linux 7.2.9\nlinux-image-7.2.12+deb14-cloud-amd64 - cloud\nlinux-image-7.3.4+deb13-amd64 - Linux 7.3.4\n"
	if got, err := pickImageTag(listing, NewestSeries, testingTag); err != nil || got != "linux-image-7.2.12+deb14-amd64" {
		t.Errorf("pickImageTag(deb14) = %q, %v", got, err)
	}
	if got, err := pickImage(listing, NewestSeries); err != nil || got != "linux-image-7.3.4+deb13-amd64" {
		t.Errorf("pickImage = %q, %v", got, err)
	}
}
