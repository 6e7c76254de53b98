// Package state owns nvmet-rebind's state directory (--state-dir,
// /var/lib/nvmet-rebind): the intent journal (journal/<kind>-<hash>.json,
// one entry per configfs object being rebound) and the device pins
// (pins.json). One fsync discipline for both: write a temp file, fsync it,
// rename it over the entry, fsync the directory.
//
// A Store is opened either for writing (Open: creates the directories,
// fixes their modes) by the one process that holds the state-dir lock, or
// read-only (OpenReadOnly: status, check, plan, metrics), which never
// creates, deletes, renames or chmods anything. Clean, for the writer at
// start, removes temp files of a crash and quarantines unreadable entries.
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// journalVersion is the format of intent files; others are refused.
const journalVersion = 1

// ErrReadOnly is returned by the write methods of a read-only store.
var ErrReadOnly = errors.New("state directory opened read-only")

// Store is the state directory.
type Store struct {
	dir      string // the state directory
	journal  string // <dir>/journal
	readOnly bool
}

// Open opens the state directory for the writer: it creates <dir> and
// <dir>/journal (mode 0700) when missing and tightens looser modes.
func Open(dir string) (*Store, error) {
	j := filepath.Join(dir, "journal")
	if err := os.MkdirAll(j, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	for _, d := range []string{dir, j} {
		st, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("state dir %s: %w", d, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("state dir %s: not a directory", d)
		}
		if st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(d, 0o700); err != nil {
				return nil, fmt.Errorf("state dir %s: mode %v: %w", d, st.Mode().Perm(), err)
			}
		}
	}
	return &Store{dir: dir, journal: j}, nil
}

// OpenReadOnly opens the state directory for observers. Nothing is
// created or changed, ever; a missing directory is an empty state.
func OpenReadOnly(dir string) *Store {
	return &Store{dir: dir, journal: filepath.Join(dir, "journal"), readOnly: true}
}

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// JournalDir is the journal directory.
func (s *Store) JournalDir() string { return s.journal }

func (s *Store) file(k rebind.Key) string {
	sum := sha256.Sum256([]byte(string(k.Kind) + "\x00" + k.ID))
	return filepath.Join(s.journal, string(k.Kind)+"-"+hex.EncodeToString(sum[:12])+".json")
}

// Put writes an intent durably, before the first configfs write it covers.
func (s *Store) Put(in rebind.Intent) error { return s.PutAll([]rebind.Intent{in}) }

// PutAll writes several intents durably (the sharers of one endpoint):
// each in its temp file, fsync'd, renamed into place, then one fsync of the
// directory for all, before the first configfs write any of them covers.
// A crash before that sync may keep any subset of them: nothing was
// written to configfs yet.
func (s *Store) PutAll(ins []rebind.Intent) error {
	if s.readOnly {
		return ErrReadOnly
	}
	// The entries are written concurrently, each temp file fsync'd and
	// renamed into place: the file system commits concurrent fsyncs
	// together (ext4 and XFS group them into one journal commit) instead
	// of one commit per entry in turn (BENCHMARKS.md, -bench PutAll).
	errs := make([]error, len(ins))
	var wg sync.WaitGroup
	sem := make(chan struct{}, syncParallel)
	for i, in := range ins {
		in.Version = journalVersion
		k := rebind.Key{Kind: in.Kind, ID: in.ID}
		b, err := json.MarshalIndent(in, "", "  ")
		if err != nil {
			errs[i] = fmt.Errorf("journal %s: %w", k, err)
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			if err := s.replaceFile(s.journal, s.file(k), b); err != nil {
				errs[i] = fmt.Errorf("journal %s: %w", k, err)
			}
			<-sem
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := syncDir(s.journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// syncParallel bounds the concurrent writes of a batch.
const syncParallel = 16

// DeleteAll removes the intents of keys (missing ones are not an error),
// with one fsync of the directory.
func (s *Store) DeleteAll(keys []rebind.Key) error {
	if s.readOnly {
		return ErrReadOnly
	}
	for _, k := range keys {
		if err := os.Remove(s.file(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("journal %s: %w", k, err)
		}
	}
	if err := syncDir(s.journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// writeFile replaces path (in dir) durably: temp file, fsync, rename,
// fsync of the directory.
func (s *Store) writeFile(dir, path string, b []byte) error {
	if s.readOnly {
		return ErrReadOnly
	}
	if err := s.replaceFile(dir, path, b); err != nil {
		return err
	}
	return syncDir(dir)
}

// replaceFile writes b to a temp file in dir, fsyncs it and renames it to
// path; the caller syncs dir.
func (s *Store) replaceFile(dir, path string, b []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return werr
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
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

// Load reads every intent, changing nothing. Unreadable entries (torn,
// empty, garbage, wrong version, misnamed) are reported in bad and never
// acted on; temp files of an interrupted Put are ignored. A missing
// journal directory is an empty journal.
func (s *Store) Load() (map[rebind.Key]rebind.Intent, []error) {
	out := map[rebind.Key]rebind.Intent{}
	ents, err := os.ReadDir(s.journal)
	if errors.Is(err, fs.ErrNotExist) && s.readOnly {
		return out, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("journal %s: %w", s.journal, err)}
	}
	var bad []error
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		in, err := s.entry(name)
		if err != nil {
			bad = append(bad, fmt.Errorf("journal entry %s: %w", filepath.Join(s.journal, name), err))
			continue
		}
		out[rebind.Key{Kind: in.Kind, ID: in.ID}] = in
	}
	return out, bad
}

// Clean, for the writer at start (under the state-dir lock), removes the
// temp files of a crash before a rename (never committed) and moves
// unreadable entries aside to <name>.corrupt. It returns what it moved.
func (s *Store) Clean() ([]error, error) {
	if s.readOnly {
		return nil, ErrReadOnly
	}
	// Temp files of an interrupted write (journal entries, pins): never
	// committed. One that cannot be removed (not ours: a directory?) is
	// reported, never read.
	var moved []error
	for _, dir := range []string{s.journal, s.dir} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return moved, fmt.Errorf("state dir %s: %w", dir, err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
					moved = append(moved, fmt.Errorf("state dir: %w", err))
				}
			}
		}
	}
	ents, err := os.ReadDir(s.journal)
	if err != nil {
		return moved, fmt.Errorf("journal %s: %w", s.journal, err)
	}
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(s.journal, name)
		if strings.HasPrefix(name, ".tmp-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		if _, err := s.entry(name); err != nil {
			moved = append(moved, fmt.Errorf("journal entry %s: %w; moved aside to %s.corrupt", path, err, name))
			if rerr := os.Rename(path, path+".corrupt"); rerr != nil {
				return moved, fmt.Errorf("journal entry %s: %w", path, rerr)
			}
		}
	}
	return moved, syncDir(s.journal)
}

func (s *Store) entry(name string) (rebind.Intent, error) {
	path := filepath.Join(s.journal, name)
	in, err := readIntent(path)
	if err == nil && s.file(rebind.Key{Kind: in.Kind, ID: in.ID}) != path {
		err = fmt.Errorf("entry names %s %q, which does not match its file name", in.Kind, in.ID)
	}
	return in, err
}

func readIntent(path string) (rebind.Intent, error) {
	f, err := os.Open(path)
	if err != nil {
		return rebind.Intent{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return rebind.Intent{}, err
	}
	var in rebind.Intent
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return rebind.Intent{}, fmt.Errorf("unreadable (%v)", err)
	}
	if in.Version != journalVersion {
		return rebind.Intent{}, fmt.Errorf("version %d, this build reads %d", in.Version, journalVersion)
	}
	switch in.Kind {
	case rebind.KindNvmet:
		if len(in.Links) == 0 {
			return rebind.Intent{}, errors.New("nvmet entry without links")
		}
	case rebind.KindLIO:
		if !in.ISER {
			return rebind.Intent{}, errors.New("lio entry without iser")
		}
	default:
		return rebind.Intent{}, fmt.Errorf("unknown kind %q", in.Kind)
	}
	if in.ID == "" {
		return rebind.Intent{}, errors.New("entry without id")
	}
	return in, nil
}

// pinEntry is one line of pins.json.
type pinEntry struct {
	Kind rebind.Kind `json:"kind"`
	ID   string      `json:"id"`
	GUID string      `json:"node_guid"` // rdma.FormatGUID
}

func (s *Store) pinsFile() string { return filepath.Join(s.dir, "pins.json") }

// Pins reads the device pins; a missing file is no pins.
func (s *Store) Pins() (map[rebind.Key]uint64, error) {
	out := map[rebind.Key]uint64{}
	b, err := os.ReadFile(s.pinsFile())
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("pins %s: %w", s.pinsFile(), err)
	}
	var pins []pinEntry
	if err := json.Unmarshal(b, &pins); err != nil {
		return out, fmt.Errorf("pins %s: %w", s.pinsFile(), err)
	}
	for _, p := range pins {
		g, err := rdma.ParseGUID(p.GUID)
		if err != nil && len(p.GUID) == 16 {
			g, err = strconv.ParseUint(p.GUID, 16, 64) // written before 0.3 as %016x
		}
		if err != nil {
			return map[rebind.Key]uint64{}, fmt.Errorf("pins %s: %s %s: %w", s.pinsFile(), p.Kind, p.ID, err)
		}
		out[rebind.Key{Kind: p.Kind, ID: p.ID}] = g
	}
	return out, nil
}

// SavePins replaces the device pins durably.
func (s *Store) SavePins(pins map[rebind.Key]uint64) error {
	list := make([]pinEntry, 0, len(pins))
	for k, g := range pins {
		list = append(list, pinEntry{Kind: k.Kind, ID: k.ID, GUID: rdma.FormatGUID(g)})
	}
	slices.SortFunc(list, func(a, b pinEntry) int {
		return strings.Compare(string(a.Kind)+"\x00"+a.ID, string(b.Kind)+"\x00"+b.ID)
	})
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return fmt.Errorf("pins: %w", err)
	}
	if err := s.writeFile(s.dir, s.pinsFile(), b); err != nil {
		return fmt.Errorf("pins %s: %w", s.pinsFile(), err)
	}
	return nil
}
