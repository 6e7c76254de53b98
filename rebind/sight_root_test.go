package rebind

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A root given one level off from a tree holding nvmet/ or target/iscsi/
// gets the right one suggested.
func TestProbeConfigfsOneLevelOff(t *testing.T) {
	tests := []struct {
		name  string
		dirs  []string
		root  string // under the temporary directory
		right string // the root suggested, under the temporary directory
	}{
		{"inside: nvmet", []string{"cfs/nvmet/ports"}, "cfs/nvmet", "cfs"},
		{"inside: target", []string{"cfs/target/iscsi"}, "cfs/target", "cfs"},
		{"above", []string{"kernel/config/nvmet"}, "kernel", "kernel/config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range tt.dirs {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			root, right := filepath.Join(dir, tt.root), filepath.Join(dir, tt.right)
			c := ProbeConfigfs(root)
			if c.Err == nil || !strings.Contains(c.Err.Error(), "use --configfs-root "+right) || strings.Contains(c.Err.Error(), "mount -t configfs") {
				t.Errorf("probe of %s: %v, want --configfs-root %s suggested", root, c.Err, right)
			}
		})
	}
}
