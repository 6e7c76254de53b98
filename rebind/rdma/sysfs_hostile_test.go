package rdma

import (
	"errors"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded/boundedtest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
)

// TestReadSysfsGIDsNonRegular: a GID table file or attribute that is not a
// regular file (a FIFO, with or without a silent writer; a device) is an
// error naming it, returned at once.
func TestReadSysfsGIDsNonRegular(t *testing.T) {
	t.Parallel()
	const port = "class/infiniband/rxe0/ports/1/"
	const gid = "fe80:0000:0000:0000:0000:0000:0000:0001\n"
	fifo := func(t *testing.T, path string) { boundedtest.FIFO(t, path) }
	fifoWriter := func(t *testing.T, path string) { boundedtest.FIFOWithWriter(t, path) }
	zero := func(t *testing.T, path string) {
		if err := syscall.Mknod(path, syscall.S_IFCHR|0o644, 1<<8|5); err != nil {
			t.Skipf("mknod: %v", err)
		}
	}
	for _, tt := range []struct {
		name, file, wantIn string
		make               func(*testing.T, string)
	}{
		{"gid FIFO", "gids/3", "gids/3: not a regular file (a FIFO)", fifo},
		{"gid FIFO with a writer", "gids/3", "gids/3: not a regular file (a FIFO)", fifoWriter},
		{"gid /dev/zero", "gids/3", "gids/3: not a regular file (a character device)", zero},
		{"ndevs FIFO", "gid_attrs/ndevs/0", "gid_attrs/ndevs/0: not a regular file (a FIFO)", fifo},
		{"ndevs FIFO with a writer", "gid_attrs/ndevs/0", "gid_attrs/ndevs/0: not a regular file (a FIFO)", fifoWriter},
		{"types /dev/zero", "gid_attrs/types/0", "gid_attrs/types/0: not a regular file (a character device)", zero},
		{"ndevs directory a FIFO", "gid_attrs/ndevs", "gid_attrs/ndevs/0", fifoWriter},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			files := map[string]string{port + "gids/0": gid, port + "gids/1": zeroGID, port + "gid_attrs/types/1": "RoCE v2\n"}
			root := sysfsTree(t, files, nil)
			p := filepath.Join(root, port, tt.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			tt.make(t, p)
			done := make(chan error, 1)
			go func() { _, err := ReadSysfsGIDs(root, "rxe0", 1); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ReadSysfsGIDs blocked for 5 s")
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("ReadSysfsGIDs = %v; want an error with %q", err, tt.wantIn)
			}
			if strings.Contains(tt.wantIn, "not a regular file") && !errors.Is(err, bounded.ErrNotRegular) {
				t.Errorf("%v does not wrap ErrNotRegular", err)
			}
		})
	}
}
