// Package state owns nvmet-rebind's state directory (--state-dir,
// /var/lib/nvmet-rebind): the intent journal (journal/, the configfs
// objects being rebound) and the device pins (pins.json). One fsync
// discipline for all: write a temp file, fsync it, rename it over the
// file, fsync the directory. A journal batch takes its fsyncs later
// (PutAll, then Sync): see "Visible, then durable" below.
//
// The journal holds two kinds of files:
//
//   - single entries, journal/<kind>-<hex of sha256(kind NUL id)[:12]>.json:
//     one intent (on one line; versions before 2026-12 indented it, which
//     reads the same), whose kind and id must match the file name. Put (and
//     PutAll of one intent) writes them, as every version before batches
//     did; a journal left by such a version replays as it is.
//   - batches, journal/batch-<seq, 20 decimal digits>.json: PutAll of
//     several intents writes them all in one file,
//     {"version":1,"seq":<seq>,"intents":[<intent>,...]} (one intent a
//     line), each intent checked as a single entry is. One temp file, one
//     rename; Sync then fsyncs the file and the directory.
//
// Visible, then durable. PutAll writes and renames, and syncs nothing:
// the intents are where a restarted daemon reads them before the first
// configfs write they cover, and a crash of the daemon (killed, a panic,
// the OOM killer, a restart) keeps them, since the kernel's page cache
// outlives the process. Sync makes them durable: the engine calls it
// once the heal's listener is back (its first binding write) and before
// the round ends, so the heal's zeros or unlinks do not wait for a disk.
// What Sync has not yet covered is lost only with the host (a power cut,
// a kernel crash), and with it the configfs state the intents describe:
// the boot's restore makes configfs again from the saved configs. A
// file so lost is gone (its rename not kept) or torn (kept without its
// content); a torn file is unreadable, and Clean moves it aside: either
// way the batch reads as none of it, and its keys as before it. Every
// other journal write (DeleteAll's, a PutAll's sync of the batch before
// it) is durable when it returns, and a batch's superseded files go only
// once it is durable.
//
// A key may be in several files (put again before its entries were
// removed). The newest write wins, by this order: every single entry is
// older than every batch (sequence 0), batches are ordered by their
// sequence (stored in the file and its name, which must agree), and within
// a batch a later intent wins over an earlier one of the same key. The
// writer gives a new batch a sequence above every batch file in the
// directory (quarantined ones included), which it learns by reading the
// directory before its first write; so a restart never reuses a lower
// one. A single entry can only be older than a batch: so when a batch
// still holds the key, Put writes a batch of one instead of a single
// entry.
//
// DeleteAll removes each key from every file that holds it: a file left
// empty is unlinked, a batch with some keys left is rewritten (temp file,
// fsync, rename over it, same sequence; what a newer file supersedes goes
// with the deleted keys). Files are changed oldest first,
// and a directory fsync separates the change of a newer file from that of
// an older one holding a key removed from both: whatever a crash keeps,
// the newer write of a key is never gone while an older one is still
// there, so a key reads as its newest write or not at all, never as a
// write it superseded.
//
// Once a batch is durable, the files it leaves without the newest write of
// any key (all superseded) are unlinked, and the directory synced again: a
// key journaled again at each retry of a failing heal never piles up files.
// A file stays only while it holds the newest write of some key (short of a
// failed write), so files never outnumber keys.
//
// The writer keeps an index of the journal's files (which keys each holds,
// the next sequence), rebuilt from the directory by Load, Clean and any
// write after a failed one; it is only a way to avoid reading the
// directory at each write, never what Load answers.
//
// A Store is opened either for writing (Open: creates missing directories,
// refuses ones others can write, never chmods one it did not create) by the one process that holds the state-dir lock, or
// read-only (OpenReadOnly: status, check, plan, metrics), which never
// creates, deletes, renames or chmods anything and keeps no index. Clean,
// for the writer at start, removes temp files of a crash and quarantines
// unreadable entries and batches.
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/owndir"
)

// journalVersion is the format of intents (single entries and each intent
// of a batch); others are refused.
const journalVersion = 1

// batchVersion is the format of batch files; others are refused.
const batchVersion = 1

// maxBatchBytes bounds what is read of a batch file (a single entry: 1 MiB).
const maxBatchBytes = 64 << 20

// ErrReadOnly is returned by the write methods of a read-only store.
var ErrReadOnly = errors.New("state directory opened read-only")

// faultAt calls the store's fault hook (tests: SetFault) before each file
// operation of the journal ("temp": a temp file written but not synced,
// "fsync" of the file that will be or was renamed to path, "rename",
// "unlink", "syncdir"); an error stands for a crash there: that
// operation and everything after it in the call is not done (a temp file
// stays, for Clean).
func (s *Store) faultAt(op, path string) error {
	if s.fault == nil {
		return nil
	}
	return s.fault(op, path)
}

// Store is the state directory.
type Store struct {
	dir      string // the state directory
	journal  string // <dir>/journal
	readOnly bool

	// The writer's index of the journal (nil: read the directory before
	// the next write); under mu with every journal operation of the writer.
	mu sync.Mutex
	ix *index
	// unsynced: the journal file the last PutAll wrote (renamed into
	// place) while Sync has not made it durable ("": none; a PutAll
	// syncs the one before it first, so there is at most one); fresh,
	// the keys of that batch, whose superseded files go once it is
	// durable (prune). Under mu.
	unsynced string
	fresh    []rebind.Key

	fault func(op, path string) error // tests only (SetFault): a crash at a file operation

	// boot is this boot's id (/proc/sys/kernel/random/boot_id), read once
	// at Open: what settled.json and the completion record are tied to.
	boot string
}

// index is what the writer knows of the journal's files.
type index struct {
	next    uint64          // the sequence of the next batch
	singles map[string]bool // names of the single-entry files: true readable, false not
	batches []*jfile        // the readable batch files, ascending sequence
}

// jfile is a readable journal file: a single entry (seq 0) or a batch.
type jfile struct {
	name string
	seq  uint64
	ins  []rebind.Intent
}

// badFile is an unreadable journal file.
type badFile struct {
	name  string
	batch bool
	err   error
}

// Open opens the state directory for the writer: it creates <dir> and
// <dir>/journal (mode 0700) when missing; existing ones keep their mode
// and owner, and are refused when others can write them (owndir.Ensure).
func Open(dir string) (*Store, error) {
	j := filepath.Join(dir, "journal")
	for _, d := range []string{dir, j} {
		if err := owndir.Ensure(d); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
	}
	return &Store{dir: dir, journal: j, boot: readBootID()}, nil
}

// OpenReadOnly opens the state directory for observers. Nothing is
// created or changed, ever; a missing directory is an empty state.
func OpenReadOnly(dir string) *Store {
	return &Store{dir: dir, journal: filepath.Join(dir, "journal"), readOnly: true, boot: readBootID()}
}

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// JournalDir is the journal directory.
func (s *Store) JournalDir() string { return s.journal }

func (s *Store) file(k rebind.Key) string {
	return filepath.Join(s.journal, singleName(k))
}

func singleName(k rebind.Key) string {
	sum := sha256.Sum256([]byte(k.Kind.String() + "\x00" + k.ID))
	return k.Kind.String() + "-" + hex.EncodeToString(sum[:12]) + ".json"
}

const batchPrefix = "batch-"

func batchName(seq uint64) string { return fmt.Sprintf("%s%020d.json", batchPrefix, seq) }

// batchSeq is the sequence a batch file's name (.corrupt included) gives.
func batchSeq(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, batchPrefix)
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, ".")
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil
}

// keysLabel names the objects of a write in its errors: the first key and
// how many more.
func keysLabel(keys []rebind.Key) string {
	switch len(keys) {
	case 0:
		return "(no entries)"
	case 1:
		return keys[0].String()
	}
	return fmt.Sprintf("%s and %d more", keys[0], len(keys)-1)
}

func keyOf(in rebind.Intent) rebind.Key { return rebind.Key{Kind: in.Kind, ID: in.ID} }

// Put is PutAll of one intent (synced by the next Sync, PutAll or DeleteAll).
func (s *Store) Put(in rebind.Intent) error { return s.PutAll([]rebind.Intent{in}) }

// PutAll writes intents where a restarted daemon reads them, before the
// first configfs write any of them covers: one intent as a single entry
// (or a batch of one when a batch holds its key), several as one batch
// file. It syncs nothing of them (Sync does; see "Visible, then durable"),
// but first makes durable what an earlier PutAll left to Sync: at most
// one batch is ever short of its sync.
func (s *Store) PutAll(ins []rebind.Intent) error {
	if s.readOnly {
		return ErrReadOnly
	}
	if len(ins) == 0 {
		return nil
	}
	// One intent a key, the last one given (as the order of reading).
	pos := make(map[rebind.Key]int, len(ins))
	list := make([]rebind.Intent, 0, len(ins))
	keys := make([]rebind.Key, 0, len(ins))
	for _, in := range ins {
		in.Version = journalVersion
		k := keyOf(in)
		if i, ok := pos[k]; ok {
			list[i] = in
			continue
		}
		pos[k] = len(list)
		list = append(list, in)
		keys = append(keys, k)
	}
	label := keysLabel(keys)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sync(); err != nil {
		return fmt.Errorf("journal %s: %w", label, err)
	}
	ix, err := s.index()
	if err != nil {
		return fmt.Errorf("journal %s: %w", label, err)
	}
	ok := false
	defer func() {
		if !ok {
			s.ix = nil // what is on disk is not known: read it again
		}
	}()
	if len(list) == 1 && !ix.batched(keys[0]) {
		b, err := appendIntent(nil, list[0])
		if err != nil {
			return fmt.Errorf("journal %s: %w", label, err)
		}
		if err := s.replaceFile(s.journal, s.file(keys[0]), b, false); err != nil {
			return fmt.Errorf("journal %s: %w", label, err)
		}
		ix.singles[singleName(keys[0])] = true
		s.unsynced = s.file(keys[0])
		ok = true
		return nil
	}
	seq := ix.next
	ix.next++
	b, err := marshalBatch(seq, list)
	if err != nil {
		return fmt.Errorf("journal %s: %w", label, err)
	}
	name := batchName(seq)
	if err := s.replaceFile(s.journal, filepath.Join(s.journal, name), b, false); err != nil {
		return fmt.Errorf("journal %s: %w", label, err)
	}
	ix.batches = append(ix.batches, &jfile{name: name, seq: seq, ins: list})
	s.unsynced, s.fresh = filepath.Join(s.journal, name), keys
	ok = true
	return nil
}

// prune, once a batch of keys is durable, unlinks the files of which
// every key now has a newer write, then syncs the directory (before any
// later removal of those keys from the newer files: the barrier of
// DeleteAll). A key put again at each retry of a failing heal so never
// piles up files: a file stays only while it holds the newest write of
// some key. What a crash keeps of it changes nothing Load gives.
func (s *Store) prune(ix *index, fresh []rebind.Key) error {
	var dead []string
	for _, k := range fresh {
		if len(ix.singles) == 0 {
			break // (a journal of batches only: no name to hash)
		}
		if name := singleName(k); ix.singles[name] { // readable: older than any batch
			dead = append(dead, name)
		}
	}
	if len(dead) == 0 && len(ix.batches) == 1 {
		return nil // the batch just written, alone: nothing superseded
	}
	newest := ix.newest()
	var live []*jfile
	for _, f := range ix.batches {
		if slices.ContainsFunc(f.ins, func(in rebind.Intent) bool { return newest[keyOf(in)] == f.seq }) {
			live = append(live, f)
		} else {
			dead = append(dead, f.name)
		}
	}
	if len(dead) == 0 {
		return nil
	}
	for _, name := range dead {
		path := filepath.Join(s.journal, name)
		err := s.faultAt("unlink", path)
		if err == nil {
			err = os.Remove(path)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("superseded: %w", err)
		}
	}
	if err := s.syncDir(s.journal); err != nil {
		return fmt.Errorf("superseded: %w", err)
	}
	for _, name := range dead {
		delete(ix.singles, name)
	}
	ix.batches = live
	return nil
}

// newest is the sequence of the newest batch holding each key.
func (ix *index) newest() map[rebind.Key]uint64 {
	newest := map[rebind.Key]uint64{}
	for _, f := range ix.batches {
		for _, in := range f.ins {
			newest[keyOf(in)] = max(newest[keyOf(in)], f.seq)
		}
	}
	return newest
}

func hasKey(m map[string]bool, k string) bool {
	_, ok := m[k]
	return ok
}

// batched tells whether a batch file holds k.
func (ix *index) batched(k rebind.Key) bool {
	for _, f := range ix.batches {
		for _, in := range f.ins {
			if keyOf(in) == k {
				return true
			}
		}
	}
	return false
}

// index is the writer's index, read from the directory when not known;
// under s.mu.
func (s *Store) index() (*index, error) {
	if s.ix != nil {
		return s.ix, nil
	}
	files, bad, maxSeq, err := s.scan()
	if err != nil {
		return nil, err
	}
	s.ix = newIndex(files, bad, maxSeq)
	return s.ix, nil
}

func newIndex(files []jfile, bad []badFile, maxSeq uint64) *index {
	ix := &index{next: maxSeq + 1, singles: map[string]bool{}}
	for i := range files {
		f := &files[i]
		if f.seq == 0 {
			ix.singles[f.name] = true
			continue
		}
		ix.batches = append(ix.batches, &jfile{name: f.name, seq: f.seq, ins: slices.Clone(f.ins)})
	}
	for _, b := range bad {
		if !b.batch {
			ix.singles[b.name] = false // removed by a Delete of its key, as ever
		}
	}
	return ix
}

// DeleteAll removes the intents of keys from every journal file holding
// them (missing ones are not an error), with one fsync of the directory
// when each key is in one file.
func (s *Store) DeleteAll(keys []rebind.Key) error {
	if s.readOnly {
		return ErrReadOnly
	}
	if len(keys) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sync(); err != nil {
		return fmt.Errorf("journal %s: %w", keysLabel(keys), err)
	}
	ix, err := s.index()
	if err != nil {
		return fmt.Errorf("journal %s: %w", keysLabel(keys), err)
	}
	// What to change, oldest file first: the single entries (older than
	// any batch), then the batches by sequence.
	type change struct {
		name  string
		batch *jfile
		keep  []rebind.Intent // what stays in a batch; none: unlink
		keys  []rebind.Key    // removed from this file
	}
	var changes []change
	gone := make(map[rebind.Key]bool, len(keys))
	for _, k := range keys {
		if gone[k] {
			continue
		}
		gone[k] = true
		if name := singleName(k); hasKey(ix.singles, name) {
			changes = append(changes, change{name: name, keys: []rebind.Key{k}})
		}
	}
	// A batch that changes also drops what newer files supersede (never
	// a key's newest write: that file is not older than itself); left
	// without a newest write, it goes.
	newest := ix.newest()
	for _, f := range ix.batches {
		if !slices.ContainsFunc(f.ins, func(in rebind.Intent) bool { return gone[keyOf(in)] }) {
			continue
		}
		var keep []rebind.Intent
		var removed []rebind.Key
		for _, in := range f.ins {
			if k := keyOf(in); gone[k] || newest[k] != f.seq {
				if !slices.Contains(removed, k) {
					removed = append(removed, k)
				}
			} else {
				keep = append(keep, in)
			}
		}
		changes = append(changes, change{name: f.name, batch: f, keep: keep, keys: removed})
	}
	if len(changes) == 0 {
		return nil
	}
	ok := false
	defer func() {
		if !ok {
			s.ix = nil // what is on disk is not known: read it again
		}
	}()
	// unsynced: keys removed from a file since the last directory sync. A
	// newer file holding one of them waits for that sync: were its change
	// kept by a crash and the older file's lost, the older write of the key
	// would come back.
	unsynced := map[rebind.Key]bool{}
	for _, c := range changes {
		if slices.ContainsFunc(c.keys, func(k rebind.Key) bool { return unsynced[k] }) {
			if err := s.syncDir(s.journal); err != nil {
				return fmt.Errorf("journal %s: %w", keysLabel(c.keys), err)
			}
			clear(unsynced)
		}
		path := filepath.Join(s.journal, c.name)
		if c.batch != nil && len(c.keep) > 0 {
			b, err := marshalBatch(c.batch.seq, c.keep)
			if err == nil {
				err = s.replaceFile(s.journal, path, b, true)
			}
			if err != nil {
				return fmt.Errorf("journal %s: %w", keysLabel(c.keys), err)
			}
		} else {
			err := s.faultAt("unlink", path)
			if err == nil {
				err = os.Remove(path)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("journal %s: %w", keysLabel(c.keys), err)
			}
		}
		for _, k := range c.keys {
			unsynced[k] = true
		}
	}
	if err := s.syncDir(s.journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	for _, c := range changes {
		switch {
		case c.batch == nil:
			delete(ix.singles, c.name)
		case len(c.keep) > 0:
			c.batch.ins = c.keep
		default:
			ix.batches = slices.DeleteFunc(ix.batches, func(f *jfile) bool { return f == c.batch })
		}
	}
	ok = true
	return nil
}

// writeFile replaces path (in dir) durably: temp file, fsync, rename,
// fsync of the directory.
func (s *Store) writeFile(dir, path string, b []byte) error {
	if s.readOnly {
		return ErrReadOnly
	}
	if err := s.replaceFile(dir, path, b, true); err != nil {
		return err
	}
	return s.syncDir(dir)
}

// replaceFile writes b to a temp file in dir, fsyncs it when durable, and
// renames it to path; the caller syncs dir.
func (s *Store) replaceFile(dir, path string, b []byte, durable bool) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	if werr == nil {
		if err := s.faultAt("temp", path); err != nil {
			f.Close()
			return err // a crash: the temp file stays
		}
		if durable {
			if err := s.faultAt("fsync", path); err != nil {
				f.Close()
				return err
			}
			werr = f.Sync()
		}
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		if err := s.faultAt("rename", path); err != nil {
			return err // a crash: the temp file stays
		}
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return werr
	}
	return nil
}

func (s *Store) syncDir(dir string) error {
	if err := s.faultAt("syncdir", dir); err != nil {
		return err
	}
	d, err := bounded.OpenDir(dir, true) // owndir checked it: a symlink there is the admin's
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Delete removes the intent for k; a missing one is not an error.
func (s *Store) Delete(k rebind.Key) error { return s.DeleteAll([]rebind.Key{k}) }
