package state_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// nv is an nvmet intent whose Address tells which write it is.
func nv(id, addr string) rebind.Intent {
	return rebind.Intent{Kind: rebind.KindNvmet, ID: id, Address: addr,
		Links: []configfs.Link{{Name: "nqn.2024-01.lab:a", NQN: "nqn.2024-01.lab:a"}}}
}

func nk(id string) rebind.Key { return rebind.Key{Kind: rebind.KindNvmet, ID: id} }

// addrs is what Load gives, key -> Address (which write).
func addrs(t *testing.T, s *state.Store) map[rebind.Key]string {
	t.Helper()
	m, bad := s.Load()
	if len(bad) != 0 {
		t.Errorf("Load reports %v", bad)
	}
	out := map[rebind.Key]string{}
	for k, in := range m {
		if k != (rebind.Key{Kind: in.Kind, ID: in.ID}) {
			t.Errorf("Load: %v holds %s %q", k, in.Kind, in.ID)
		}
		out[k] = in.Address
	}
	return out
}

// names lists the journal directory.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

var batchRe = regexp.MustCompile(`^batch-[0-9]{20}\.json$`)

// oldName is the file name of a single entry as every version wrote it.
func oldName(k rebind.Key) string {
	sum := sha256.Sum256([]byte(k.Kind.String() + "\x00" + k.ID))
	return k.Kind.String() + "-" + hex.EncodeToString(sum[:12]) + ".json"
}

// snapshot is the state directory, path -> mode and content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		v := st.Mode().String()
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// putSynced is PutAll then Sync: a batch as a round leaves it (the
// engine syncs once the heal's listener is back, and at the round's end).
func putSynced(s *state.Store, ins []rebind.Intent) error {
	if err := s.PutAll(ins); err != nil {
		return err
	}
	return s.Sync()
}

func open(t *testing.T, dir string) *state.Store {
	t.Helper()
	s, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBatchRoundTrip: a batch is one file; removing all its keys unlinks
// it, removing some rewrites it with the others.
func TestBatchRoundTrip(t *testing.T) {
	const n = 256
	var ins []rebind.Intent
	var keys []rebind.Key
	want := map[rebind.Key]string{}
	for i := range n {
		id := strconv.Itoa(i + 1)
		ins = append(ins, nv(id, "192.0.2.1:4420"))
		keys = append(keys, nk(id))
		want[nk(id)] = "192.0.2.1:4420"
	}
	for _, tt := range []struct {
		name  string
		del   []rebind.Key
		files int // left in journal/
	}{
		{"delete all", keys, 0},
		{"delete a subset", append(slices.Clone(keys[:100]), nk("9999")), 1},
		{"delete the last one", keys[n-1:], 1},
		{"delete none journaled", []rebind.Key{nk("9999"), {Kind: rebind.KindLIO, ID: "iqn.x/tpgt_1/192.0.2.1:3260"}}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			if err := s.PutAll(ins); err != nil {
				t.Fatal(err)
			}
			files := names(t, dir)
			if len(files) != 1 || !batchRe.MatchString(files[0]) {
				t.Fatalf("journal after PutAll of %d: %q, want one batch file", n, files)
			}
			if got := addrs(t, s); !maps.Equal(got, want) {
				t.Fatalf("Load after PutAll: %d entries, want %d", len(got), len(want))
			}
			if err := s.DeleteAll(tt.del); err != nil {
				t.Fatal(err)
			}
			left := maps.Clone(want)
			for _, k := range tt.del {
				delete(left, k)
			}
			after := names(t, dir)
			if len(after) != tt.files || (tt.files == 1 && after[0] != files[0]) {
				t.Errorf("journal after DeleteAll: %q, want %d file(s) (%s)", after, tt.files, files[0])
			}
			for _, st := range []*state.Store{s, open(t, dir), state.OpenReadOnly(dir)} {
				if got := addrs(t, st); !maps.Equal(got, left) {
					t.Errorf("Load after DeleteAll: %d entries, want %d", len(got), len(left))
				}
			}
		})
	}
}

// TestNewestWins: a key in several files reads as its newest write, across
// restarts of the writer, whichever the formats; DeleteAll removes it from
// all of them.
func TestNewestWins(t *testing.T) {
	k, j, x := nk("1"), nk("2"), nk("3")
	type step struct {
		reopen bool // a new writer (a restart) before the step
		// keep: the put keeps the files it supersedes (their unlink fails,
		// as if the writer crashed right after the batch was durable)
		keep  bool
		put   []rebind.Intent
		del   []rebind.Key
		want  map[rebind.Key]string // Load after the step
		files int                   // in journal/ after the step
	}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"single then batch", []step{
			{put: []rebind.Intent{nv("1", "v1")}, want: map[rebind.Key]string{k: "v1"}, files: 1},
			{put: []rebind.Intent{nv("1", "v2"), nv("2", "v2")}, want: map[rebind.Key]string{k: "v2", j: "v2"}, files: 1},
			{del: []rebind.Key{k}, want: map[rebind.Key]string{j: "v2"}, files: 1},
		}},
		{"single then batch, the single kept", []step{
			{put: []rebind.Intent{nv("1", "v1")}, want: map[rebind.Key]string{k: "v1"}, files: 1},
			{keep: true, put: []rebind.Intent{nv("1", "v2"), nv("2", "v2")}, want: map[rebind.Key]string{k: "v2", j: "v2"}, files: 2},
			{reopen: true, want: map[rebind.Key]string{k: "v2", j: "v2"}, files: 2},
			{del: []rebind.Key{k}, want: map[rebind.Key]string{j: "v2"}, files: 1},
		}},
		{"batch then single after a restart", []step{
			{put: []rebind.Intent{nv("1", "v1"), nv("2", "v1")}, want: map[rebind.Key]string{k: "v1", j: "v1"}, files: 1},
			{reopen: true, put: []rebind.Intent{nv("1", "v2")}, want: map[rebind.Key]string{k: "v2", j: "v1"}, files: 2},
			{reopen: true, put: []rebind.Intent{nv("1", "v3"), nv("3", "v3")}, want: map[rebind.Key]string{k: "v3", j: "v1", x: "v3"}, files: 2},
			{reopen: true, put: []rebind.Intent{nv("1", "v4")}, want: map[rebind.Key]string{k: "v4", j: "v1", x: "v3"}, files: 3},
			{reopen: true, del: []rebind.Key{k}, want: map[rebind.Key]string{j: "v1", x: "v3"}, files: 2},
		}},
		{"a key in three files, the superseded kept", []step{
			{put: []rebind.Intent{nv("1", "v1")}, want: map[rebind.Key]string{k: "v1"}, files: 1},
			{keep: true, reopen: true, put: []rebind.Intent{nv("1", "v2"), nv("2", "v2")}, want: map[rebind.Key]string{k: "v2", j: "v2"}, files: 2},
			{keep: true, reopen: true, put: []rebind.Intent{nv("1", "v3"), nv("3", "v3")}, want: map[rebind.Key]string{k: "v3", j: "v2", x: "v3"}, files: 3},
			{reopen: true, del: []rebind.Key{k, x}, want: map[rebind.Key]string{j: "v2"}, files: 1},
		}},
		{"batches of other keys after a restart keep the earlier ones", []step{
			{put: []rebind.Intent{nv("1", "v1"), nv("2", "v1")}, want: map[rebind.Key]string{k: "v1", j: "v1"}, files: 1},
			{reopen: true, put: []rebind.Intent{nv("3", "v1"), nv("4", "v1")}, want: map[rebind.Key]string{k: "v1", j: "v1", x: "v1", nk("4"): "v1"}, files: 2},
			{reopen: true, put: []rebind.Intent{nv("2", "v2"), nv("3", "v2")}, want: map[rebind.Key]string{k: "v1", j: "v2", x: "v2", nk("4"): "v1"}, files: 3},
			{reopen: true, del: []rebind.Key{j, x}, want: map[rebind.Key]string{k: "v1", nk("4"): "v1"}, files: 2},
		}},
		{"a delete leaves a batch only superseded writes: it goes", []step{
			{put: []rebind.Intent{nv("1", "v1"), nv("4", "v1")}, want: map[rebind.Key]string{k: "v1", nk("4"): "v1"}, files: 1},
			{put: []rebind.Intent{nv("4", "v2"), nv("6", "v2")}, want: map[rebind.Key]string{k: "v1", nk("4"): "v2", nk("6"): "v2"}, files: 2},
			{reopen: true, del: []rebind.Key{k}, want: map[rebind.Key]string{nk("4"): "v2", nk("6"): "v2"}, files: 1},
		}},
		{"a key twice in one batch: the last", []step{
			{put: []rebind.Intent{nv("1", "v1"), nv("2", "v1"), nv("1", "v2")}, want: map[rebind.Key]string{k: "v2", j: "v1"}, files: 1},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			for i, st := range tt.steps {
				if st.reopen {
					s = open(t, dir)
				}
				if st.put != nil {
					restore := func() {}
					if st.keep {
						restore = state.SetFault(s, func(op, path string) error {
							if op == "unlink" {
								return errors.New("crash")
							}
							return nil
						})
					}
					err := putSynced(s, st.put)
					restore()
					if (err != nil) != st.keep {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				if st.del != nil {
					if err := s.DeleteAll(st.del); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				for _, r := range []*state.Store{s, state.OpenReadOnly(dir)} {
					if got := addrs(t, r); !maps.Equal(got, st.want) {
						t.Errorf("step %d: Load %v, want %v (journal %q)", i, got, st.want, names(t, dir))
					}
				}
				if got := names(t, dir); len(got) != st.files {
					t.Errorf("step %d: journal %q, want %d files", i, got, st.files)
				}
			}
		})
	}
}

// TestJournalCrashAtEveryOperation: a crash at any file operation of a
// scenario, losing any of the operations not yet made durable by a
// directory sync, leaves each batch whole or absent, and each key as its
// newest write or absent, never as a write it superseded; no temp file
// survives Clean, nothing is reported, and the restarted writer removes
// everything.
func TestJournalCrashAtEveryOperation(t *testing.T) {
	type step struct {
		put []rebind.Intent
		del []rebind.Key
	}
	batch := func(from, to int, v string) step {
		var st step
		for i := from; i <= to; i++ {
			st.put = append(st.put, nv(strconv.Itoa(i), v))
		}
		return st
	}
	for _, tt := range []struct {
		name  string
		steps []step
		// The journal before and after each step.
		states []map[rebind.Key]string
	}{
		{
			// Key 3 is in A and B when deleted: A loses it first.
			name:  "batch A of 1-4, batch B of 3-6, delete 2 3 5",
			steps: []step{batch(1, 4, "A"), batch(3, 6, "B"), {del: []rebind.Key{nk("2"), nk("3"), nk("5")}}},
			states: []map[rebind.Key]string{
				{},
				{nk("1"): "A", nk("2"): "A", nk("3"): "A", nk("4"): "A"},
				{nk("1"): "A", nk("2"): "A", nk("3"): "B", nk("4"): "B", nk("5"): "B", nk("6"): "B"},
				{nk("1"): "A", nk("4"): "B", nk("6"): "B"},
			},
		},
		{
			// C supersedes what B left of A: A goes.
			name:  "batch A of 1-4, batch B of 3-6, batch C of 1-2, delete 1 3 5",
			steps: []step{batch(1, 4, "A"), batch(3, 6, "B"), batch(1, 2, "C"), {del: []rebind.Key{nk("1"), nk("3"), nk("5")}}},
			states: []map[rebind.Key]string{
				{},
				{nk("1"): "A", nk("2"): "A", nk("3"): "A", nk("4"): "A"},
				{nk("1"): "A", nk("2"): "A", nk("3"): "B", nk("4"): "B", nk("5"): "B", nk("6"): "B"},
				{nk("1"): "C", nk("2"): "C", nk("3"): "B", nk("4"): "B", nk("5"): "B", nk("6"): "B"},
				{nk("2"): "C", nk("4"): "B", nk("6"): "B"},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			crashes := 0
			for n := 1; ; n++ {
				done := crashAt(t, n, tt.steps, tt.states, func(s *state.Store, st step) error {
					if st.put != nil {
						return putSynced(s, st.put)
					}
					return s.DeleteAll(st.del)
				}, func(st step) bool { return st.put != nil })
				if done {
					break
				}
				crashes++
			}
			if crashes == 0 {
				t.Fatal("no operation crashed")
			}
			t.Logf("%d crash points", crashes)
		})
	}
}

// crashAt runs steps with a crash at the n-th file operation, then checks
// the journal with every subset of the operations since the last directory
// sync lost, and every subset of the files renamed into place without
// their fsync torn (kept empty: a host crash can keep a rename and lose
// the content; Clean must move them aside, and the batch read as none of
// it). It tells whether the steps ran to their end (n is past the last
// operation).
func crashAt[S any](t *testing.T, n int, steps []S, states []map[rebind.Key]string, run func(*state.Store, S) error, isPut func(S) bool) bool {
	t.Helper()
	// undo restores a file as it was before a rename or unlink.
	type undo struct {
		path    string
		existed bool
		content []byte
	}
	dir := t.TempDir()
	s := open(t, dir)
	ops := 0
	var unsynced []undo
	// loose: paths whose new content is written and not fsynced; the
	// renamed ones of them can be torn.
	loose, renamed := map[string]bool{}, map[string]bool{}
	restore := state.SetFault(s, func(op, path string) error {
		ops++
		if ops == n {
			return fmt.Errorf("crash at %s %s", op, path)
		}
		switch op {
		case "temp":
			loose[path] = true
		case "fsync":
			delete(loose, path)
			delete(renamed, path)
		case "rename", "unlink":
			b, err := os.ReadFile(path)
			unsynced = append(unsynced, undo{path, err == nil, b})
			if op == "rename" && loose[path] {
				renamed[path] = true
			} else {
				delete(renamed, path)
			}
		case "syncdir":
			unsynced = nil
		}
		return nil
	})
	step := 0
	for ; step < len(steps); step++ {
		if err := run(s, steps[step]); err != nil {
			break
		}
	}
	restore()
	if step == len(steps) {
		unsynced, renamed = nil, nil // no crash: every write durable
	}
	tearable := slices.Sorted(maps.Keys(renamed))
	for variant := range 1 << (len(unsynced) + len(tearable)) {
		lost, torn := variant&(1<<len(unsynced)-1), variant>>len(unsynced)
		name := fmt.Sprintf("crash at operation %d (step %d), unsynced %d lost %b, torn %b of %d", n, step, len(unsynced), lost, torn, len(tearable))
		d := filepath.Join(t.TempDir(), "state")
		if err := os.CopyFS(d, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		for i, u := range unsynced {
			if lost&(1<<i) == 0 {
				continue
			}
			p := filepath.Join(d, strings.TrimPrefix(u.path, dir))
			if u.existed {
				if err := os.WriteFile(p, u.content, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		// A torn file: its rename kept (not undone above), its content not.
		var tornNames []string
		for i, path := range tearable {
			p := filepath.Join(d, strings.TrimPrefix(path, dir))
			if torn&(1<<i) == 0 {
				continue
			}
			if _, err := os.Stat(p); err != nil {
				continue // its rename was lost: nothing to tear
			}
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			tornNames = append(tornNames, filepath.Base(p))
		}
		r := open(t, d)
		moved, err := r.Clean()
		if err != nil || len(moved) != len(tornNames) {
			t.Errorf("%s: Clean: %v %v, want %q moved aside", name, moved, err, tornNames)
		}
		for _, f := range names(t, d) {
			if !batchRe.MatchString(f) && !slices.Contains(tornNames, strings.TrimSuffix(f, ".corrupt")) {
				t.Errorf("%s: %s left after Clean", name, f)
			}
		}
		got := addrs(t, r)
		switch {
		case step == len(steps):
			if !maps.Equal(got, states[step]) {
				t.Errorf("%s: %v, want %v", name, got, states[step])
			}
		case isPut(steps[step]): // a batch: whole or absent
			if pre, post := states[step], states[step+1]; !maps.Equal(got, pre) && !maps.Equal(got, post) {
				t.Errorf("%s: %v, want %v or %v", name, got, pre, post)
			}
		default: // any subset of the keys deleted; the others as they were
			pre, post := states[step], states[step+1]
			for k, v := range got {
				if want, ok := pre[k]; !ok || v != want {
					t.Errorf("%s: %v is %q, want %q or absent", name, k, v, pre[k])
				}
			}
			for k, v := range post {
				if got[k] != v {
					t.Errorf("%s: %v is %q, want %q", name, k, got[k], v)
				}
			}
		}
		// The restarted writer finishes the work.
		var all []rebind.Key
		for _, st := range states {
			for k := range st {
				if !slices.Contains(all, k) {
					all = append(all, k)
				}
			}
		}
		if err := r.DeleteAll(all); err != nil {
			t.Errorf("%s: DeleteAll after the restart: %v", name, err)
		}
		if f := slices.DeleteFunc(names(t, d), func(f string) bool { return strings.HasSuffix(f, ".corrupt") }); len(f) != 0 {
			t.Errorf("%s: journal after deleting everything: %q", name, f)
		}
	}
	return step == len(steps)
}

// TestSupersededFilesGo: keys journaled again and again (the retries of a
// failing heal, as the engine journals a round: its first heal alone, the
// others in a batch) never pile up files: a file stays only while it holds
// the newest write of some key.
func TestSupersededFilesGo(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	want := map[rebind.Key]string{}
	for round := range 10 {
		v := strconv.Itoa(round)
		var ins []rebind.Intent
		// The heals of a round shift: keys round..round+31, the first alone.
		for i := round; i < round+32; i++ {
			ins = append(ins, nv(strconv.Itoa(i), v))
			want[nk(strconv.Itoa(i))] = v
		}
		if round%3 == 2 { // sometimes a restart
			s = open(t, dir)
		}
		if err := s.PutAll(ins[:1]); err != nil {
			t.Fatal(err)
		}
		if err := putSynced(s, ins[1:]); err != nil {
			t.Fatal(err)
		}
		if got := addrs(t, state.OpenReadOnly(dir)); !maps.Equal(got, want) {
			t.Fatalf("round %d: Load %v, want %v", round, got, want)
		}
	}
	// Each round's first key (0-9) stays in the file of its round (the
	// single entry of round 0, a batch of one later: the key is in the
	// previous batch), keys 10-40 in the last batch; each round's batch
	// goes when the next round supersedes all of it.
	if f := names(t, dir); len(f) != 11 {
		t.Errorf("journal of 41 keys after 10 rounds: %d files %q, want 11", len(f), f)
	}
	// The same round again and again: two files.
	dir = t.TempDir()
	s = open(t, dir)
	for range 10 {
		if err := s.PutAll([]rebind.Intent{nv("1", "x")}); err != nil {
			t.Fatal(err)
		}
		if err := putSynced(s, []rebind.Intent{nv("2", "x"), nv("3", "x"), nv("4", "x")}); err != nil {
			t.Fatal(err)
		}
	}
	if f := names(t, dir); len(f) != 2 {
		t.Errorf("journal after the same round 10 times: %q, want 2 files", f)
	}
}

// TestOldFormatJournal: the single entries written by every version before
// batches load, are superseded by batches (and unlinked, or kept as by a
// crash) and deleted with them; a misnamed one is still refused.
func TestOldFormatJournal(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("superseded kept %v", keep), func(t *testing.T) { testOldFormatJournal(t, keep) })
	}
}

func testOldFormatJournal(t *testing.T, keep bool) {
	dir := t.TempDir()
	lio := rebind.Key{Kind: rebind.KindLIO, ID: "iqn.x/tpgt_1/192.0.2.1:3260"}
	if err := os.MkdirAll(filepath.Join(dir, "journal"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		oldName(nk("1")): `{
  "version": 1,
  "kind": "nvmet",
  "id": "1",
  "address": "old",
  "links": [
    {
      "name": "nqn.2024-01.lab:a",
      "nqn": "nqn.2024-01.lab:a"
    }
  ],
  "started": "2026-01-01T00:00:00Z"
}
`,
		oldName(lio): `{"version":1,"kind":"lio","id":"iqn.x/tpgt_1/192.0.2.1:3260","address":"old","iser":true,"started":"2026-01-01T00:00:00Z"}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, "journal", name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, dir)
	if got, want := addrs(t, s), map[rebind.Key]string{nk("1"): "old", lio: "old"}; !maps.Equal(got, want) {
		t.Fatalf("old journal: %v, want %v", got, want)
	}
	restore := func() {}
	if keep {
		restore = state.SetFault(s, func(op, path string) error {
			if op == "unlink" {
				return errors.New("crash")
			}
			return nil
		})
	}
	err := putSynced(s, []rebind.Intent{nv("1", "new"), nv("2", "new")})
	restore()
	if (err != nil) != keep {
		t.Fatal(err)
	}
	if got, want := addrs(t, s), map[rebind.Key]string{nk("1"): "new", nk("2"): "new", lio: "old"}; !maps.Equal(got, want) {
		t.Errorf("old journal and a batch: %v, want %v", got, want)
	}
	files := names(t, dir)
	if want := []string{oldName(lio), oldName(nk("1"))}; !keep {
		want = want[:1]
		if len(files) != 2 || !slices.Contains(files, want[0]) {
			t.Errorf("journal %q, want %q and a batch", files, want)
		}
	} else if len(files) != 3 || !slices.Contains(files, want[0]) || !slices.Contains(files, want[1]) {
		t.Errorf("journal %q, want %q and a batch", files, want)
	}
	if err := open(t, dir).DeleteAll([]rebind.Key{nk("1"), lio}); err != nil {
		t.Fatal(err)
	}
	if got, want := addrs(t, s), map[rebind.Key]string{nk("2"): "new"}; !maps.Equal(got, want) {
		t.Errorf("after DeleteAll: %v, want %v", got, want)
	}
	if f := names(t, dir); len(f) != 1 || !batchRe.MatchString(f[0]) {
		t.Errorf("journal after DeleteAll: %q, want the batch", f)
	}
	// A single entry whose content is not its file name's: refused.
	if err := os.WriteFile(filepath.Join(dir, "journal", oldName(nk("3"))), []byte(`{"version":1,"kind":"nvmet","id":"4","address":"x","links":[{"name":"a","nqn":"a"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, bad := s.Load(); len(m) != 1 || len(bad) != 1 || !strings.Contains(bad[0].Error(), "does not match its file name") {
		t.Errorf("misnamed entry: %v %v", m, bad)
	}
}

// TestCorruptBatch: an unreadable batch is reported by Load (the other
// files still load), left alone by a read-only store, quarantined whole by
// Clean; a later batch gets a sequence above the quarantined one's.
func TestCorruptBatch(t *testing.T) {
	const seq9 = "batch-00000000000000000009.json"
	good := `{"version":1,"kind":"nvmet","id":"9","address":"x","links":[{"name":"a","nqn":"a"}]}`
	for _, tt := range []struct{ name, file, content string }{
		{"empty", seq9, ""},
		{"torn", seq9, `{"version":1,"seq":9,"intents":[` + "\n" + good + ",\n" + good[:20]},
		{"garbage", seq9, "\x00\x01not json"},
		{"batch version", seq9, `{"version":2,"seq":9,"intents":[` + good + `]}`},
		{"sequence not its name's", seq9, `{"version":1,"seq":8,"intents":[` + good + `]}`},
		{"unknown field", seq9, `{"version":1,"seq":9,"more":1,"intents":[` + good + `]}`},
		{"no intents", seq9, `{"version":1,"seq":9,"intents":[]}`},
		{"an intent without links", seq9, `{"version":1,"seq":9,"intents":[` + good + `,{"version":1,"kind":"nvmet","id":"8","address":"x"}]}`},
		{"an intent of another version", seq9, `{"version":1,"seq":9,"intents":[{"version":2,"kind":"nvmet","id":"8","address":"x","links":[{"name":"a","nqn":"a"}]}]}`},
		{"name without 20 digits", "batch-9.json", `{"version":1,"seq":9,"intents":[` + good + `]}`},
		// The kernel's naming rules: an entry it could never write is
		// refused before any write (a heal would unlink, then fail).
		{"a link name with a slash", seq9, `{"version":1,"seq":9,"intents":[{"version":1,"kind":"nvmet","id":"8","address":"x","links":[{"name":"a","nqn":"a"},{"name":"bad/name","nqn":"a"}]}]}`},
		{"a link to a control character", seq9, `{"version":1,"seq":9,"intents":[{"version":1,"kind":"nvmet","id":"8","address":"x","links":[{"name":"a","nqn":"a\u0007"}]}]}`},
		{"an NQN longer than 223 bytes", seq9, `{"version":1,"seq":9,"intents":[{"version":1,"kind":"nvmet","id":"8","address":"x","links":[{"name":"a","nqn":"` + strings.Repeat("n", 224) + `"}]}]}`},
		{"a port id that is not a u16", seq9, `{"version":1,"seq":9,"intents":[{"version":1,"kind":"nvmet","id":"65536","address":"x","links":[{"name":"a","nqn":"a"}]}]}`},
		{"a port id with a dot-dot", seq9, `{"version":1,"seq":9,"intents":[{"version":1,"kind":"nvmet","id":"..","address":"x","links":[{"name":"a","nqn":"a"}]}]}`},
		{"a portal id without tpgt", seq9, `{"version":1,"seq":9,"intents":[{"version":1,"kind":"lio","id":"iqn.a/tpg1/192.0.2.1:3260","address":"x","iser":true}]}`},
		{"a portal np that is not ip:port", seq9, `{"version":1,"seq":9,"intents":[{"version":1,"kind":"lio","id":"iqn.a/tpgt_1/host:3260","address":"x","iser":true}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			if err := s.Put(nv("1", "single")); err != nil {
				t.Fatal(err)
			}
			if err := s.PutAll([]rebind.Intent{nv("2", "batch"), nv("3", "batch")}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "journal", tt.file)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			want := map[rebind.Key]string{nk("1"): "single", nk("2"): "batch", nk("3"): "batch"}
			before := snapshot(t, dir)
			for _, r := range []*state.Store{state.OpenReadOnly(dir), s} {
				m, bad := r.Load()
				if len(bad) != 1 || !strings.Contains(bad[0].Error(), path) {
					t.Errorf("Load reports %v, want %s", bad, path)
				}
				got := map[rebind.Key]string{}
				for k, in := range m {
					got[k] = in.Address
				}
				if !maps.Equal(got, want) {
					t.Errorf("Load %v, want %v", got, want)
				}
			}
			if after := snapshot(t, dir); !maps.Equal(before, after) {
				t.Errorf("Load changed the state dir")
			}
			moved, err := open(t, dir).Clean()
			if err != nil || len(moved) != 1 || !strings.Contains(moved[0].Error(), "moved aside") {
				t.Fatalf("Clean: %v %v", moved, err)
			}
			if _, err := os.Stat(path + ".corrupt"); err != nil {
				t.Errorf("not quarantined: %v", err)
			}
			if got := addrs(t, s); !maps.Equal(got, want) {
				t.Errorf("Load after Clean %v, want %v", got, want)
			}
			if err := s.PutAll([]rebind.Intent{nv("4", "later"), nv("5", "later")}); err != nil {
				t.Fatal(err)
			}
			if f := names(t, dir); tt.file == seq9 && !slices.Contains(f, "batch-00000000000000000010.json") {
				t.Errorf("journal %q: the batch after a quarantined batch-9 is not batch-10", f)
			}
		})
	}
}

// TestReadOnlyJournal: a read-only store writes nothing and loads what the
// writer does, batches, superseded keys, a temp file and a corrupt batch
// included.
func TestReadOnlyJournal(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	for _, ins := range [][]rebind.Intent{
		{nv("1", "v1")},
		{nv("1", "v2"), nv("2", "v2"), nv("3", "v2")},
		{nv("3", "v3"), nv("4", "v3")},
		{nv("2", "v4")},
	} {
		if err := s.PutAll(ins); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{".tmp-1": "half", "batch-00000000000000000099.json": "{torn"} {
		if err := os.WriteFile(filepath.Join(dir, "journal", name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	ro := state.OpenReadOnly(dir)
	for name, err := range map[string]error{
		"PutAll":    ro.PutAll([]rebind.Intent{nv("5", "ro"), nv("6", "ro")}),
		"Put":       ro.Put(nv("5", "ro")),
		"DeleteAll": ro.DeleteAll([]rebind.Key{nk("1"), nk("2")}),
		"Delete":    ro.Delete(nk("1")),
	} {
		if !errors.Is(err, state.ErrReadOnly) {
			t.Errorf("read-only %s: %v, want ErrReadOnly", name, err)
		}
	}
	if _, err := ro.Clean(); !errors.Is(err, state.ErrReadOnly) {
		t.Errorf("read-only Clean: %v, want ErrReadOnly", err)
	}
	want, wbad := s.Load()
	got, bad := ro.Load()
	if !maps.EqualFunc(got, want, func(a, b rebind.Intent) bool { return a.Address == b.Address }) || len(bad) != 1 || len(wbad) != 1 {
		t.Errorf("read-only Load %v %v, writer's %v %v", got, bad, want, wbad)
	}
	if got[nk("1")].Address != "v2" || got[nk("2")].Address != "v4" || got[nk("3")].Address != "v3" {
		t.Errorf("read-only Load: not the newest writes: %v", got)
	}
	if after := snapshot(t, dir); !maps.Equal(before, after) {
		t.Errorf("a read-only store changed the state dir")
	}
	// No directory: an empty journal, nothing created.
	none := filepath.Join(t.TempDir(), "none")
	if m, bad := state.OpenReadOnly(none).Load(); len(m) != 0 || len(bad) != 0 {
		t.Errorf("missing state dir: %v %v", m, bad)
	}
	if _, err := os.Stat(none); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only Load created %s", none)
	}
}

// TestPutAllVisibleThenDurable: PutAll renames its batch into place and
// syncs nothing of it, so the heal's first configfs write waits for no
// disk; a restarted daemon (the store opened again, the files as the page
// cache has them) reads the batch whole; Sync fsyncs the file, then the
// directory; a PutAll with a batch still short of its sync syncs that one
// first.
func TestPutAllVisibleThenDurable(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	var ops []string
	defer state.SetFault(s, func(op, path string) error {
		ops = append(ops, op+" "+filepath.Base(path))
		return nil
	})()
	take := func() []string { o := ops; ops = nil; return o }
	a := batch(1, 3, "A")
	if err := s.PutAll(a); err != nil {
		t.Fatal(err)
	}
	if got, want := take(), []string{"temp " + batchName(1), "rename " + batchName(1)}; !slices.Equal(got, want) {
		t.Errorf("PutAll: %q, want %q (no fsync)", got, want)
	}
	if got, want := addrs(t, open(t, dir)), map[rebind.Key]string{nk("1"): "A", nk("2"): "A", nk("3"): "A"}; !maps.Equal(got, want) {
		t.Errorf("after PutAll, restarted: %v, want %v", got, want)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, want := take(), []string{"fsync " + batchName(1), "syncdir journal"}; !slices.Equal(got, want) {
		t.Errorf("Sync: %q, want %q", got, want)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := take(); len(got) != 0 {
		t.Errorf("Sync with nothing written: %q, want nothing", got)
	}
	// B is left short of its sync: C's PutAll makes it durable first.
	if err := s.PutAll(batch(4, 5, "B")); err != nil {
		t.Fatal(err)
	}
	take()
	if err := s.PutAll(batch(1, 3, "C")); err != nil {
		t.Fatal(err)
	}
	if got, want := take(), []string{"fsync " + batchName(2), "syncdir journal", "temp " + batchName(3), "rename " + batchName(3)}; !slices.Equal(got, want) {
		t.Errorf("PutAll with B unsynced: %q, want %q", got, want)
	}
	// A is superseded by C: it goes once C is durable, not before.
	if f := names(t, dir); !slices.Contains(f, batchName(1)) {
		t.Errorf("A gone before C is durable: %q", f)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, want := take(), []string{"fsync " + batchName(3), "syncdir journal", "unlink " + batchName(1), "syncdir journal"}; !slices.Equal(got, want) {
		t.Errorf("Sync of C: %q, want %q", got, want)
	}
}

func batch(from, to int, v string) []rebind.Intent {
	var ins []rebind.Intent
	for i := from; i <= to; i++ {
		ins = append(ins, nv(strconv.Itoa(i), v))
	}
	return ins
}

func batchName(seq int) string { return fmt.Sprintf("batch-%020d.json", seq) }
