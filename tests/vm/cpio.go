// Package vm builds and boots the end-to-end test VM: Debian's stock kernels
// under qemu (TCG) with a small initramfs holding dash, busybox, iproute2,
// kmod, nvme-cli, the kernel modules the scenarios need, the nvmet-rebind
// binary and the guest scripts.
//
// Nothing here touches the host's /boot or its network: kernels are unpacked
// into a cache folder, and the guest has no network device at all
// (qemu -nodefaults -nic none).
package vm

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Archive is an in-memory cpio "newc" archive under construction. Paths are
// absolute guest paths ("/bin/sh"); parent directories are created on
// demand. A later entry for the same path replaces the earlier one.
type Archive struct {
	entries map[string]*entry
}

type entry struct {
	mode   uint32 // full st_mode (type bits included)
	data   []byte // file content or symlink target
	src    string // file on the host to read at write time (instead of data)
	size   int64
	rmajor uint32
	rminor uint32
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
	sIFCHR = 0o020000
)

// NewArchive returns an empty archive.
func NewArchive() *Archive { return &Archive{entries: map[string]*entry{}} }

func clean(p string) string {
	p = path.Clean("/" + p)
	return p
}

// Dir adds a directory (and its parents).
func (a *Archive) Dir(p string) {
	p = clean(p)
	if p == "/" {
		return
	}
	if e, ok := a.entries[p]; ok && e.mode&0o170000 == sIFDIR {
		return
	}
	a.Dir(path.Dir(p))
	a.entries[p] = &entry{mode: sIFDIR | 0o755}
}

// Bytes adds a regular file with the given content.
func (a *Archive) Bytes(p string, data []byte, perm uint32) {
	p = clean(p)
	a.Dir(path.Dir(p))
	a.entries[p] = &entry{mode: sIFREG | perm&0o7777, data: data, size: int64(len(data))}
}

// File adds a regular file copied from the host (symlinks are followed).
func (a *Archive) File(p, src string, perm uint32) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	if perm == 0 {
		perm = uint32(st.Mode().Perm())
	}
	p = clean(p)
	a.Dir(path.Dir(p))
	a.entries[p] = &entry{mode: sIFREG | perm&0o7777, src: src, size: st.Size()}
	return nil
}

// Symlink adds a symbolic link.
func (a *Archive) Symlink(p, target string) {
	p = clean(p)
	a.Dir(path.Dir(p))
	a.entries[p] = &entry{mode: sIFLNK | 0o777, data: []byte(target), size: int64(len(target))}
}

// CharDev adds a character device node.
func (a *Archive) CharDev(p string, major, minor uint32, perm uint32) {
	p = clean(p)
	a.Dir(path.Dir(p))
	a.entries[p] = &entry{mode: sIFCHR | perm&0o7777, rmajor: major, rminor: minor}
}

// Has reports whether the path is in the archive.
func (a *Archive) Has(p string) bool { _, ok := a.entries[clean(p)]; return ok }

// Len is the number of entries.
func (a *Archive) Len() int { return len(a.entries) }

// WriteTo writes the archive as cpio newc (uncompressed).
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	// Parents sort before children with a plain sort of the path strings
	// only when '/' sorts first; sort by depth-aware key instead.
	sort.Slice(names, func(i, j int) bool {
		return strings.ReplaceAll(names[i], "/", "\x00") < strings.ReplaceAll(names[j], "/", "\x00")
	})
	cw := &countWriter{w: w}
	ino := uint32(1000)
	for _, n := range names {
		e := a.entries[n]
		ino++
		var body io.Reader
		if e.src != "" {
			f, err := os.Open(e.src)
			if err != nil {
				return cw.n, err
			}
			st, err := f.Stat()
			if err != nil {
				f.Close()
				return cw.n, err
			}
			e.size = st.Size()
			body = f
			err = writeEntry(cw, strings.TrimPrefix(n, "/"), e, ino, body)
			f.Close()
			if err != nil {
				return cw.n, err
			}
			continue
		}
		if e.data != nil {
			body = strings.NewReader(string(e.data))
		}
		if err := writeEntry(cw, strings.TrimPrefix(n, "/"), e, ino, body); err != nil {
			return cw.n, err
		}
	}
	if err := writeEntry(cw, "TRAILER!!!", &entry{}, 0, nil); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

// WriteGzipFile writes the archive, gzip-compressed, to a file (atomically).
func (a *Archive) WriteGzipFile(file string) error {
	tmp := file + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if _, err := a.WriteTo(zw); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func pad4(w *countWriter) error {
	if r := c4(w.n); r > 0 {
		_, err := w.Write(make([]byte, r))
		return err
	}
	return nil
}

func c4(n int64) int64 { return (4 - n%4) % 4 }

func writeEntry(w *countWriter, name string, e *entry, ino uint32, body io.Reader) error {
	nlink := 1
	if e.mode&0o170000 == sIFDIR {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.mode, 0, 0, nlink, 0, e.size, 0, 0, e.rmajor, e.rminor, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr); err != nil {
		return err
	}
	if _, err := io.WriteString(w, name+"\x00"); err != nil {
		return err
	}
	if err := pad4(w); err != nil {
		return err
	}
	if body != nil && e.size > 0 {
		n, err := io.CopyN(w, body, e.size)
		if err != nil {
			return fmt.Errorf("%s: wrote %d of %d bytes: %w", name, n, e.size, err)
		}
	}
	return pad4(w)
}
