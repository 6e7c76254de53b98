//go:build !linux

package configfs

import (
	"io"
	"os"
)

func readSmall(path string, max int) ([]byte, error) { return readSmallGeneric(path, max) }

// readSmallGeneric reads at most max+1 bytes of a file.
func readSmallGeneric(path string, max int) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return io.ReadAll(io.LimitReader(fh, int64(max)+1))
}
