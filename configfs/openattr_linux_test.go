package configfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenOnConfigfsAgreesWithCheckedOpen compares openAttr's one-openat2
// open (taken on the kernel's configfs only) with its checked open (taken
// on every other tree), on a tmpfs tree holding every kind of entry
// configfs can have where an attribute is looked for: an attribute, a
// directory, a symlink as the attribute or on the way, a missing name, and
// a way out of the root. The fast open must open the very file the checked
// open opens, and refuse wherever it refuses. (A device, FIFO or socket
// cannot exist on configfs; the checked open's refusal of them is
// TestHostileWorlds'.)
func TestOpenOnConfigfsAgreesWithCheckedOpen(t *testing.T) {
	root := t.TempDir()
	np := filepath.Join(root, "target/iscsi/iqn.x/tpgt_1/np/192.0.2.1:3260")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(np, "dir"), 0o755))
	must(os.WriteFile(filepath.Join(np, "iser"), []byte("1\n"), 0o644))
	must(os.Symlink("iser", filepath.Join(np, "link")))
	must(os.Symlink("192.0.2.1:3260", filepath.Join(filepath.Dir(np), "alias")))
	outside := t.TempDir()
	must(os.WriteFile(filepath.Join(outside, "iser"), []byte("1\n"), 0o644))
	must(os.Symlink(outside, filepath.Join(filepath.Dir(np), "out")))

	rel := "target/iscsi/iqn.x/tpgt_1/np/"
	cases := []struct {
		name  string
		rel   string
		opens bool
	}{
		{"an attribute", rel + "192.0.2.1:3260/iser", true},
		{"a directory", rel + "192.0.2.1:3260/dir", false},
		{"a symlink as the attribute", rel + "192.0.2.1:3260/link", false},
		{"a symlink on the way", rel + "alias/iser", false},
		{"a symlink out of the root on the way", rel + "out/iser", false},
		{"a missing attribute", rel + "192.0.2.1:3260/nope", false},
		{"a missing directory", rel + "nope/iser", false},
	}
	o := OSOps{Root: root}
	for _, c := range cases {
		for _, flags := range []int{unix.O_RDWR, unix.O_WRONLY} {
			slow, serr := o.openAttr(filepath.Join(root, c.rel), flags)
			rfd, err := openRoot(root)
			must(err)
			fast, ferr := openOnConfigfs(rfd, c.rel, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
			rawClose(rfd)
			if (serr == nil) != c.opens {
				t.Errorf("%s (flags %#x): checked open: %v, want opened=%v", c.name, flags, serr, c.opens)
			}
			switch {
			case ferr == nil && serr != nil:
				t.Errorf("%s (flags %#x): the one openat2 opened what the checked open refuses (%v)", c.name, flags, serr)
			case ferr != nil && serr == nil:
				t.Errorf("%s (flags %#x): the one openat2 refused (%v) what the checked open opens", c.name, flags, ferr)
			case ferr == nil:
				var a, b unix.Stat_t
				must(unix.Fstat(slow, &a))
				must(unix.Fstat(fast, &b))
				if a.Dev != b.Dev || a.Ino != b.Ino {
					t.Errorf("%s (flags %#x): the two opens opened different files", c.name, flags)
				}
			case errors.Is(serr, fs.ErrNotExist) != errors.Is(ferr, unix.ENOENT):
				// openAttr returns the one openat2's ENOENT as it is: the
				// checked open must call the same names missing.
				t.Errorf("%s (flags %#x): missing to one open and not the other: checked %v, openat2 %v", c.name, flags, serr, ferr)
			}
			if serr == nil {
				rawClose(slow)
			}
			if ferr == nil {
				rawClose(fast)
			}
		}
	}
}
