package watch

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
)

// benchTree makes n nvmet ports and n LIO portals (one target each, the
// most watches per portal) on tmpfs when there is one.
func benchTree(b *testing.B, n int) *configfstest.Fake {
	b.Helper()
	k := configfstest.NewAt(shmDir(b), binder{})
	k.AddSubsystem("nqn.2014-08.org.example:a")
	for i := range n {
		k.AddPort(fmt.Sprint(i+1), "rdma", "ipv4", benchAddr(i), "4420")
		k.AddPortal(fmt.Sprintf("iqn.2003-01.org.example:t%d", i), "tpgt_1", benchAddr(i)+":3260")
	}
	return k
}

// shmDir is a directory of the benchmark's own on tmpfs when there is
// one, removed at its end.
func shmDir(b *testing.B) string {
	b.Helper()
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	root, err := os.MkdirTemp(base, "watch-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	return root
}

func benchAddr(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }

// change writes 1 % of the ports' addr_traddr and of the portals' iser.
func change(b *testing.B, k *configfstest.Fake, n, round int) {
	b.Helper()
	admin := k.Admin()
	for j := range max(n/100, 1) {
		i := (round*97 + j*101) % n
		if err := admin.WriteAttr(fmt.Sprintf("%s/nvmet/ports/%d/addr_traddr", k.Root, i+1), benchAddr(i+round)); err != nil {
			b.Fatal(err)
		}
		v := fmt.Sprint(round % 2)
		p := fmt.Sprintf("%s/target/iscsi/iqn.2003-01.org.example:t%d/tpgt_1/np/%s:3260/iser", k.Root, i, benchAddr(i))
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

var benchSizes = []int{256, 1024, 4096}

// BenchmarkModelRead: the engine's read after an event, Ports and
// Portals, with 1 % of the ports and portals changed since the last one.
func BenchmarkModelRead(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			k := benchTree(b, n)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m, err := New(k.FS(), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RescanEvery: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
			watches := float64(m.Stats().Watches)
			m.mu.Lock()
			m.stats.Reads = 0
			m.mu.Unlock()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				change(b, k, n, i+1)
				b.StartTimer()
				if _, err := m.Ports(); err != nil {
					b.Fatal(err)
				}
				if _, err := m.Portals(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			s := m.Stats()
			b.ReportMetric(float64(s.Reads)/float64(b.N), "configfs-reads/op")
			b.ReportMetric(heap, "model-heap-B") // after the loop: ResetTimer clears metrics
			b.ReportMetric(watches, "watches")
			if s.Rescans != 1 {
				b.Errorf("stats %+v: a rescan during the benchmark", s)
			}
		})
	}
}

// BenchmarkFullRead: the same reads through configfs.FS (today's cost).
func BenchmarkFullRead(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			k := benchTree(b, n)
			fsys := k.FS()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				change(b, k, n, i+1)
				b.StartTimer()
				if _, err := fsys.Ports(); err != nil {
					b.Fatal(err)
				}
				if _, err := fsys.Portals(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRescan: the periodic rescan (rescan_interval) at n ports and n
// portals, of a model that is right: configfs read whole around the model
// and compared with its answers. Its CPU time is most of an idle daemon's
// (tests/idle-cost.sh), reported as cpu-ms/op (the process's user and
// system time: the wall time of a system call on a VM is not all CPU).
// It reads the tree through the daemon's own configfs.OSOps, not the fake
// kernel's.
func BenchmarkRescan(b *testing.B) { benchRescan(b, true) }

// BenchmarkRebuild: the rescan of a model that cannot trust itself (an
// overflow, a module loaded): the cache forgotten, configfs read whole
// through it, every directory watched anew.
func BenchmarkRebuild(b *testing.B) { benchRescan(b, false) }

func benchRescan(b *testing.B, trusted bool) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			k := benchTree(b, n)
			m, err := New(configfs.New(k.Root), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RescanEvery: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				m.mu.Lock()
				m.rescan(trusted, "benchmark")
				m.mu.Unlock()
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
			if s := m.Stats(); s.Disagreements != 0 {
				b.Errorf("stats %+v: the model disagreed with a rescan", s)
			}
		})
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDropChildren: a directory of n children (a port's subsystems/
// with n links) loses every child in the order they were made, as a
// port's unlinks remove them (the model's own writes drop each link's
// node). Before the children of a large directory were kept only in its
// index, each removal walked the chain: quadratic in n.
func BenchmarkDropChildren(b *testing.B) {
	for _, n := range []int{1000, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := &Model{opts: Options{BigDir: 8}}
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("nqn.2024-01.io.e2e:vol-%d", i)
			}
			kids := make([]*node, n)
			for b.Loop() {
				b.StopTimer()
				p := &node{name: "subsystems"}
				for i, name := range names {
					kids[i] = m.addKid(p, name, true)
				}
				b.StartTimer()
				for _, k := range kids {
					m.unlinkKid(p, k)
				}
			}
		})
	}
}

// BenchmarkPortLinks: a port with 1,000 subsystems linked loses every
// link and gets it back (a heal's unlinks and links, one call each), on
// tmpfs, through the model (each write marks what it changed: the
// model's bookkeeping) and through the plain tree (the system calls
// alone). The model's next read, which takes the writes' events, is not
// timed.
func BenchmarkPortLinks(b *testing.B) {
	for _, via := range []string{"model", "fs"} {
		b.Run(via, func(b *testing.B) {
			root := b.TempDir()
			if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
				d, err := os.MkdirTemp("/dev/shm", "watch-bench-")
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { os.RemoveAll(d) })
				root = d
			}
			links := make([]configfs.Link, 1000)
			for i := range links {
				nqn := fmt.Sprintf("nqn.2024-01.io.e2e:vol-%d", i+1)
				links[i] = configfs.Link{Name: nqn, NQN: nqn}
				if err := os.MkdirAll(filepath.Join(root, "nvmet", "subsystems", nqn), 0o755); err != nil {
					b.Fatal(err)
				}
			}
			for _, d := range []string{"nvmet/ports/1/subsystems", "nvmet/hosts", "target/iscsi"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					b.Fatal(err)
				}
			}
			fsys := configfs.New(root)
			m, err := New(fsys, Options{Logger: slog.New(slog.DiscardHandler), RescanEvery: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			type writer interface {
				UnlinkAll(string, []configfs.Link, func(int, error) bool) error
				RelinkAll(string, []configfs.Link, func(int, error) bool) error
			}
			var w writer = fsys
			if via == "model" {
				w = m
			}
			ok := func(_ int, err error) bool {
				if err != nil {
					b.Fatal(err)
				}
				return true
			}
			if err := w.RelinkAll("1", links, ok); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				b.StopTimer()
				if got, err := m.Links("1"); err != nil || len(got) != len(links) {
					b.Fatalf("%d links, %v; want %d", len(got), err, len(links))
				}
				b.StartTimer()
				if err := w.UnlinkAll("1", links, ok); err != nil {
					b.Fatal(err)
				}
				if err := w.RelinkAll("1", links, ok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSharerZeros: 256 targets share one iSER portal (Cinder's
// layout); a heal writes each sharer's iser 0, then 1 (SwapISERs, one
// call each), on tmpfs, through the model (each write marks what it
// changed) and through the plain tree (the system calls, the paths). The
// model's next read, which takes the writes' events, is not timed.
func BenchmarkSharerZeros(b *testing.B) {
	for _, via := range []string{"model", "fs"} {
		b.Run(via, func(b *testing.B) {
			k := configfstest.NewAt(shmDir(b), binder{})
			ids := make([]string, 256)
			for i := range ids {
				iqn := fmt.Sprintf("iqn.2010-10.org.openstack:volume-%08d-aaaa-bbbb-cccc-dddddddddddd", i)
				k.AddPortal(iqn, "tpgt_1", "192.0.2.1:3260")
				ids[i] = iqn + "/tpgt_1/192.0.2.1:3260"
			}
			fsys := configfs.New(k.Root)
			m, err := New(fsys, Options{Logger: slog.New(slog.DiscardHandler), RescanEvery: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			type swapper interface {
				SwapISERs([]string, bool, func(int, bool, error) bool) error
			}
			var w swapper = fsys
			if via == "model" {
				w = m
			}
			ok := func(_ int, _ bool, err error) bool {
				if err != nil {
					b.Fatal(err)
				}
				return true
			}
			for b.Loop() {
				b.StopTimer()
				if got, err := m.Portals(); err != nil || len(got) != len(ids) {
					b.Fatalf("%d portals, %v; want %d", len(got), err, len(ids))
				}
				b.StartTimer()
				if err := w.SwapISERs(ids, false, ok); err != nil {
					b.Fatal(err)
				}
				if err := w.SwapISERs(ids, true, ok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
