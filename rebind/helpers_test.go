package rebind_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
)

var errAddrNotAvail = syscall.EADDRNOTAVAIL

type netipPrefix = netip.Prefix

func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

func journalFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// stateDir prefers a tmpfs (/dev/shm) for benchmarks, like /var/lib on a
// fast disk; fsync costs there are not what is measured.
func stateDir(tb testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "nvmet-rebind-bench-")
		if err == nil {
			tb.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return tb.TempDir()
}

// fakeKernel is the tests' fake kernel: both fakes wired together.
type fakeKernel = rdmatest.System

var newFakeKernel = rdmatest.NewSystem
