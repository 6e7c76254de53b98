package rebind_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// TestHostileWorlds attacks the reading and the writing paths together:
// random configfs trees and state directories with FIFOs, devices,
// symlinks in every position, names the engine cannot represent,
// oversized attributes and invalid journal entries, reconciled through
// the real configfs code (configfs.New: the daemon's reads and its
// openat2 writes; no fake tree) against a fake RDMA kernel on which
// every listener is dead, so every port it manages is rebound. Each world
// must: finish (a deadline: nothing blocks), not panic, change nothing
// outside the configfs root and the state directory, and leave no port
// with fewer links than it had.
func TestHostileWorlds(t *testing.T) {
	worlds := 200
	if testing.Short() {
		worlds = 60
	}
	for seed := range worlds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			hostileWorld(t, uint64(seed))
		})
	}
}

func hostileWorld(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 19))
	base := t.TempDir()
	root, st, outside := filepath.Join(base, "cfs"), filepath.Join(base, "state"), filepath.Join(base, "outside")
	w := &hostileBuilder{t: t, r: r, root: root, outside: outside}
	w.victims()
	w.tree()
	w.stateDir(st)
	before := treeDigest(t, outside)
	links := w.portLinks()

	k := rdmatest.New()
	k.AddAddr("veth0", "192.0.2.1")
	k.AddAddr("veth0", "192.0.2.2")
	k.AddDevice("rxe0", 0x11, "veth0")
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("panic: %v", p)
			}
		}()
		j, err := state.Open(st)
		if err != nil {
			done <- nil // refused at open: a clear error, nothing read
			return
		}
		cfg := rebind.DefaultConfig()
		e := rebind.New(rebind.Options{Tree: configfs.New(root), Kernel: k, Store: j, Config: cfg})
		for range 3 {
			if _, err := e.Reconcile(context.Background()); err != nil {
				t.Logf("round: %v", err) // an unusable tree is an error, not a hang
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, w.log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("seed %d: reconcile blocked for 20 s on:\n%s", seed, w.log.String())
	}
	if after := treeDigest(t, outside); after != before {
		t.Errorf("seed %d: something outside the configfs root and the state dir changed:\nbefore %s\nafter  %s\nworld:\n%s", seed, before, after, w.log.String())
	}
	now := w.portLinks()
	for port, n := range links {
		if now[port] < n {
			t.Errorf("seed %d: nvmet port %q had %d links, now %d\nworld:\n%s", seed, port, n, now[port], w.log.String())
		}
	}
}

// hostileBuilder makes one random world; log says what it made.
type hostileBuilder struct {
	t                   *testing.T
	r                   *rand.Rand
	root, outside       string
	log                 strings.Builder
	victimDir, victimFn string
}

func (w *hostileBuilder) say(format string, args ...any) { fmt.Fprintf(&w.log, format+"\n", args...) }

func (w *hostileBuilder) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *hostileBuilder) put(path, value string) {
	w.must(os.MkdirAll(filepath.Dir(path), 0o755))
	w.must(os.WriteFile(path, []byte(value), 0o644))
}

// victims is what hostile symlinks point at: a directory shaped like a
// port's subsystems (its one link looks valid: it points at a subsystem
// of the root, so only refusing the symlinked directory protects it) and
// a file shaped like an attribute.
func (w *hostileBuilder) victims() {
	w.victimDir, w.victimFn = filepath.Join(w.outside, "dir"), filepath.Join(w.outside, "file")
	w.must(os.MkdirAll(w.victimDir, 0o755))
	w.must(os.Symlink(filepath.Join(w.root, "nvmet", "subsystems", "nqn.2024-01.lab:a"), filepath.Join(w.victimDir, "nqn.2024-01.lab:a")))
	w.put(w.victimFn, "rdma\n")
}

// hostile returns a thing to put where a file or directory is expected.
func (w *hostileBuilder) hostile(path string, dir bool) {
	w.must(os.MkdirAll(filepath.Dir(path), 0o755))
	pick := w.r.IntN(6)
	if dir && w.r.IntN(2) == 0 {
		pick = 2 // a directory outside: the attack that matters most
	}
	switch pick {
	case 0:
		w.must(syscall.Mkfifo(path, 0o644))
		w.say("  %s: a FIFO", path)
	case 1:
		w.must(os.Symlink("/dev/zero", path))
		w.say("  %s: a symlink to /dev/zero", path)
	case 2:
		target := w.victimFn
		if dir {
			target = w.victimDir
		}
		w.must(os.Symlink(target, path))
		w.say("  %s: a symlink outside", path)
	case 3:
		w.must(os.Symlink(filepath.Join(w.outside, "missing"), path))
		w.say("  %s: a dangling symlink", path)
	case 4:
		if dir {
			w.put(path, "a file where a directory is")
		} else {
			w.put(path, strings.Repeat("9", 70000))
		}
		w.say("  %s: a file / oversized", path)
	default:
		w.must(os.Symlink("/dev/null", path))
		w.say("  %s: a symlink to /dev/null", path)
	}
}

// tree makes nvmet ports and LIO portals, each damaged with probability
// one half somewhere.
func (w *hostileBuilder) tree() {
	subs := filepath.Join(w.root, "nvmet", "subsystems")
	for _, n := range []string{"nqn.2024-01.lab:a", "nqn.2024-01.lab:b"} {
		w.must(os.MkdirAll(filepath.Join(subs, n), 0o755))
	}
	if w.r.IntN(4) == 0 {
		w.must(os.Symlink(w.victimDir, filepath.Join(subs, "nqn.2024-01.lab:c")))
		w.say("subsystem nqn.2024-01.lab:c: a symlink outside")
	}
	for i := range 1 + w.r.IntN(5) {
		id := fmt.Sprint(i + 1)
		if w.r.IntN(8) == 0 {
			id += []string{"\n", "\x1b[2J", "\t", "\x7f"}[w.r.IntN(4)]
		}
		d := filepath.Join(w.root, "nvmet", "ports", id)
		w.say("nvmet port %q", id)
		if w.r.IntN(10) == 0 {
			w.hostile(d, true)
			continue
		}
		attrs := map[string]string{"addr_trtype": "rdma", "addr_adrfam": "ipv4", "addr_traddr": fmt.Sprintf("192.0.2.%d", 1+w.r.IntN(2)), "addr_trsvcid": fmt.Sprint(4420 + i)}
		for _, a := range slices.Sorted(maps.Keys(attrs)) {
			if w.r.IntN(10) == 0 {
				w.hostile(filepath.Join(d, a), false)
			} else {
				w.put(filepath.Join(d, a), attrs[a]+"\n")
			}
		}
		sd := filepath.Join(d, "subsystems")
		if w.r.IntN(4) == 0 {
			w.hostile(sd, true)
			continue
		}
		w.must(os.MkdirAll(sd, 0o755))
		for _, n := range []string{"nqn.2024-01.lab:a", "nqn.2024-01.lab:b"}[:w.r.IntN(3)] {
			w.must(os.Symlink(filepath.Join(subs, n), filepath.Join(sd, n)))
		}
		switch w.r.IntN(8) {
		case 0:
			w.must(os.Symlink(w.victimDir, filepath.Join(sd, "nqn.2024-01.lab:evil")))
			w.say("  a link outside")
		case 1:
			w.hostile(filepath.Join(sd, "nqn.2024-01.lab:x"), false)
		case 2:
			w.must(os.Symlink(filepath.Join(subs, "nqn.2024-01.lab:a"), filepath.Join(sd, "bad\nname")))
			w.say("  a link named with a newline")
		}
	}
	for i := range 1 + w.r.IntN(3) {
		np := filepath.Join(w.root, "target", "iscsi", "iqn.2024-01.lab:t", "tpgt_1", "np", fmt.Sprintf("192.0.2.%d:%d", 1+w.r.IntN(2), 3260+i))
		w.say("lio portal %s", np)
		switch w.r.IntN(6) {
		case 0:
			w.hostile(np, true)
		case 1:
			w.hostile(filepath.Join(np, "iser"), false)
		default:
			w.put(filepath.Join(np, "iser"), "1\n")
		}
	}
	if w.r.IntN(8) == 0 {
		tpg := filepath.Join(w.root, "target", "iscsi", "iqn.2024-01.lab:u", "tpgt_1")
		w.hostile(tpg, true)
	}
}

// stateDir makes the state directory with a journal of valid, invalid and
// hostile entries, and sometimes a hostile pins file.
func (w *hostileBuilder) stateDir(dir string) {
	j, err := state.Open(dir)
	w.must(err)
	var ins []rebind.Intent
	for i := range w.r.IntN(4) {
		in := rebind.Intent{Version: 1, Kind: rebind.KindNvmet, ID: fmt.Sprint(i + 1), Address: fmt.Sprintf("192.0.2.%d:%d", 1+w.r.IntN(2), 4420+i),
			Links: []configfs.Link{{Name: "nqn.2024-01.lab:a", NQN: "nqn.2024-01.lab:a"}}, Started: time.Now()}
		switch w.r.IntN(4) {
		case 0:
			in.Links = append(in.Links, configfs.Link{Name: "bad/name", NQN: "nqn.2024-01.lab:b"})
		case 1:
			in.ID = "../../etc"
		case 2:
			in.Links = append(in.Links, configfs.Link{Name: "nqn.2024-01.lab:b", NQN: "nqn.2024-01.lab:b"})
		}
		ins = append(ins, in)
	}
	for _, in := range ins {
		if err := j.PutAll([]rebind.Intent{in}); err != nil {
			// The store refuses what it could not name: plant the entry as a
			// crash or an editor would have left it.
			b, _ := json.Marshal(in)
			w.put(filepath.Join(dir, "journal", fmt.Sprintf("nvmet-%x.json", sha256.Sum256([]byte(in.ID)))[:80]), string(b))
		}
		w.say("journal: %+v", in)
	}
	switch w.r.IntN(5) {
	case 0:
		w.hostile(filepath.Join(dir, "journal", "nvmet-0123456789abcdef01234567.json"), false)
	case 1:
		w.put(filepath.Join(dir, "journal", "nvmet-fedcba9876543210fedcba98.json"), "{not json")
		w.say("journal: a broken entry")
	case 2:
		w.hostile(filepath.Join(dir, "pins.json"), false)
	}
}

// portLinks counts the links of every port whose subsystems directory is
// a real directory: what the world had that a heal must not lose.
func (w *hostileBuilder) portLinks() map[string]int {
	out := map[string]int{}
	ports := filepath.Join(w.root, "nvmet", "ports")
	ents, _ := os.ReadDir(ports)
	for _, p := range ents {
		sd := filepath.Join(ports, p.Name(), "subsystems")
		if st, err := os.Lstat(filepath.Join(ports, p.Name())); err != nil || !st.IsDir() {
			continue
		}
		if st, err := os.Lstat(sd); err != nil || !st.IsDir() {
			continue
		}
		links, _ := os.ReadDir(sd)
		for _, l := range links {
			if l.Type()&fs.ModeSymlink != 0 {
				out[p.Name()]++
			}
		}
	}
	return out
}

// treeDigest is every name, type, mode, content and symlink target under
// dir.
func treeDigest(t *testing.T, dir string) string {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v\n", p, st.Mode())
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			fmt.Fprintln(h, l)
		case st.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}
