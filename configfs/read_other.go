//go:build !linux

package configfs

import (
	"io"
	"os"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
)

func readSmall(path string, max int, buf []byte) ([]byte, error) {
	b, err := readSmallGeneric(path, max)
	return append(buf, b...), err
}

// readSmallGeneric reads at most max+1 bytes of a file, which must be a
// regular file and not a symlink (checked before the open, which would
// wait on a FIFO: these builds are for development only).
func readSmallGeneric(path string, max int) ([]byte, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := bounded.CheckMode(path, st.Mode()); err != nil {
		return nil, err
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return io.ReadAll(io.LimitReader(fh, int64(max)+1))
}
