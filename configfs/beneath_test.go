package configfs

import (
	"path/filepath"
	"strings"
	"testing"
)

// beneath takes a path it can see is clean straight (a shared portal's
// heal makes one for each sharer); every path gets what filepath.Rel of
// the cleaned path gives, and one outside the root is refused.
func TestBeneathIsRel(t *testing.T) {
	for _, root := range []string{"/sys/kernel/config", "/sys/kernel/config/", "/tmp/cfg", "/"} {
		o := OSOps{Root: root}
		clean := filepath.Clean(root)
		for _, path := range []string{
			clean + "/target/iscsi/iqn.x/tpgt_1/np/192.0.2.1:3260/iser",
			clean + "/nvmet/ports/1/addr_traddr",
			clean + "/a",
			clean + "/a/",
			clean + "//a",
			clean + "/a//b",
			clean + "/a/./b",
			clean + "/a/../b",
			clean + "/./a",
			clean + "/.",
			clean + "/..",
			clean + "/../etc/passwd",
			clean + "/a/..",
			clean + "/..a/b.",
			clean,
			clean + "x/a",
			"/elsewhere/a",
			"relative/a",
		} {
			wantRel, err := filepath.Rel(clean, filepath.Clean(path))
			wantOK := err == nil && wantRel != "." && wantRel != ".." && !strings.HasPrefix(wantRel, "../") && !filepath.IsAbs(wantRel)
			gotRoot, gotRel, gotErr := o.beneath(path)
			switch {
			case wantOK && (gotErr != nil || gotRoot != clean || gotRel != wantRel):
				t.Errorf("root %q: beneath(%q) = %q, %q, %v; want %q, %q", root, path, gotRoot, gotRel, gotErr, clean, wantRel)
			case !wantOK && gotErr == nil:
				t.Errorf("root %q: beneath(%q) = %q, %q; want it refused (outside the root)", root, path, gotRoot, gotRel)
			}
		}
	}
}

// iserPath is the path filepath.Join makes of a portal's iser.
func TestISERPathIsJoin(t *testing.T) {
	for _, root := range []string{"/sys/kernel/config", "/sys/kernel/config/", "/", "/tmp//cfg"} {
		f := NewWithOps(root, nil)
		for _, id := range []string{"iqn.2003-01.org.example:t1/tpgt_1/192.0.2.1:3260", "iqn.x/tpgt_65535/[2001:db8::1]:3260", "a/b/c"} {
			iqn, tpg, np, err := ParsePortalID(id)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := f.iserPath(iqn, tpg, np), f.iscsi(iqn, tpg, "np", np, "iser"); got != want {
				t.Errorf("root %q, portal %q: iserPath %q, want %q", root, id, got, want)
			}
		}
	}
}

// SplitPortalID splits what ParsePortalID parses, and refuses what has not
// three parts.
func TestSplitPortalID(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"iqn.x/tpgt_1/192.0.2.1:3260", true}, {"a/b/c", true}, {"a/b", false}, {"a/b/c/d", false}, {"abc", false}, {"", false}, {"//", true},
	} {
		iqn, tpg, np, ok := SplitPortalID(c.id)
		if ok != c.ok {
			t.Errorf("SplitPortalID(%q) ok = %v, want %v", c.id, ok, c.ok)
			continue
		}
		if ok && iqn+"/"+tpg+"/"+np != c.id {
			t.Errorf("SplitPortalID(%q) = %q %q %q", c.id, iqn, tpg, np)
		}
		if piqn, ptpg, pnp, err := ParsePortalID(c.id); err == nil && (!ok || piqn != iqn || ptpg != tpg || pnp != np) {
			t.Errorf("ParsePortalID(%q) = %q %q %q; SplitPortalID %q %q %q %v", c.id, piqn, ptpg, pnp, iqn, tpg, np, ok)
		}
	}
}
