package state

// Reading the journal: Load, the writer's Clean, and what makes an entry
// valid (checkIntent: the format and the kernel's naming rules).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Load reads every intent, changing nothing: of a key in several files,
// the newest write (see the package comment). Unreadable entries and
// batches (torn, empty, garbage, wrong version, misnamed) are reported in
// bad and never acted on; temp files of an interrupted write are ignored.
// A missing journal directory is an empty journal. The writer's index is
// rebuilt from what it read.
func (s *Store) Load() (map[rebind.Key]rebind.Intent, []error) {
	if !s.readOnly {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	files, badFiles, maxSeq, err := s.scan()
	if errors.Is(err, fs.ErrNotExist) && s.readOnly {
		return map[rebind.Key]rebind.Intent{}, nil
	}
	if err != nil {
		s.ix = nil
		return nil, []error{fmt.Errorf("journal %s: %w", s.journal, err)}
	}
	out := make(map[rebind.Key]rebind.Intent, len(files))
	for _, f := range files { // oldest first: the newest write stays
		for _, in := range f.ins {
			out[keyOf(in)] = in
		}
	}
	var bad []error
	for _, b := range badFiles {
		bad = append(bad, fmt.Errorf("journal entry %s: %w", filepath.Join(s.journal, b.name), b.err))
	}
	if !s.readOnly {
		s.ix = newIndex(files, badFiles, maxSeq)
	}
	return out, bad
}

// scan reads the journal: its readable files, oldest first (single
// entries, then batches by sequence), its unreadable ones, and the highest
// batch sequence a file name holds. An empty journal is one ReadDir.
func (s *Store) scan() (files []jfile, bad []badFile, maxSeq uint64, err error) {
	ents, err := bounded.ReadDir(s.journal, true)
	if err != nil {
		return nil, nil, 0, err
	}
	for _, e := range ents {
		name := e.Name()
		seq, isBatch := batchSeq(name)
		if isBatch {
			maxSeq = max(maxSeq, seq)
		}
		if strings.HasPrefix(name, ".tmp-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		if strings.HasPrefix(name, batchPrefix) {
			ins, err := s.readBatch(name)
			if err != nil {
				bad = append(bad, badFile{name: name, batch: true, err: err})
				continue
			}
			files = append(files, jfile{name: name, seq: seq, ins: ins})
			continue
		}
		in, err := s.entry(name)
		if err != nil {
			bad = append(bad, badFile{name: name, err: err})
			continue
		}
		files = append(files, jfile{name: name, ins: []rebind.Intent{in}})
	}
	slices.SortStableFunc(files, func(a, b jfile) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	return files, bad, maxSeq, nil
}

// Clean, for the writer at start (under the state-dir lock), removes the
// temp files of a crash (never committed) and moves unreadable entries and
// batches aside to <name>.corrupt. It returns what it moved.
func (s *Store) Clean() ([]error, error) {
	if s.readOnly {
		return nil, ErrReadOnly
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ix = nil
	// Temp files of an interrupted write (journal entries, pins): never
	// committed. One that cannot be removed (not ours: a directory?) is
	// reported, never read.
	var moved []error
	for _, dir := range []string{s.journal, s.dir} {
		ents, err := bounded.ReadDir(dir, true)
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
	files, bad, maxSeq, err := s.scan()
	if err != nil {
		return moved, fmt.Errorf("journal %s: %w", s.journal, err)
	}
	for _, b := range bad {
		path := filepath.Join(s.journal, b.name)
		moved = append(moved, fmt.Errorf("journal entry %s: %w; moved aside to %s.corrupt", path, b.err, b.name))
		if rerr := os.Rename(path, path+".corrupt"); rerr != nil {
			return moved, fmt.Errorf("journal entry %s: %w", path, rerr)
		}
	}
	if err := s.syncDir(s.journal); err != nil {
		return moved, err
	}
	s.ix = newIndex(files, nil, maxSeq)
	return moved, nil
}

func (s *Store) entry(name string) (rebind.Intent, error) {
	path := filepath.Join(s.journal, name)
	in, err := readIntent(path)
	if err == nil && s.file(keyOf(in)) != path {
		err = fmt.Errorf("entry names %s %q, which does not match its file name", in.Kind, in.ID)
	}
	return in, err
}

// maxEntryBytes bounds a single journal entry (one intent: a few hundred
// bytes).
const maxEntryBytes = 1 << 20

func readIntent(path string) (rebind.Intent, error) {
	b, err := readEntry(path, maxEntryBytes)
	if err != nil {
		return rebind.Intent{}, err
	}
	var in rebind.Intent
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return rebind.Intent{}, fmt.Errorf("unreadable (%v)", err)
	}
	return in, checkIntent(in)
}

// readEntry reads a journal file, bounded, without following a symlink
// and refusing anything but a regular file before reading it (a FIFO
// would block the read, a device would never end it). The journal writes
// only regular files: what else is there is a bad entry, reported by Load
// and moved aside by Clean, whose messages name the file: the error does
// not.
func readEntry(path string, limit int64) ([]byte, error) {
	b, err := bounded.ReadFile(path, limit, false)
	if be, ok := errors.AsType[*bounded.Error](err); ok {
		bare := *be
		bare.Path, bare.Fix = "", ""
		return nil, &bare
	}
	return b, err
}

// checkIntent is what makes an intent readable, alone or in a batch.
func checkIntent(in rebind.Intent) error {
	if in.Version != journalVersion {
		return fmt.Errorf("version %d, this build reads %d", in.Version, journalVersion)
	}
	switch in.Kind {
	case rebind.KindNvmet:
		if len(in.Links) == 0 {
			return errors.New("nvmet entry without links")
		}
	case rebind.KindLIO:
		if !in.ISER {
			return errors.New("lio entry without iser")
		}
	default:
		return fmt.Errorf("unknown kind %q", in.Kind)
	}
	if in.ID == "" {
		return errors.New("entry without id")
	}
	// The kernel's naming rules, as configfs objects get them: an entry
	// that could never be written is refused before any write.
	if in.Kind == rebind.KindNvmet {
		if err := configfs.CheckPortID(in.ID); err != nil {
			return err
		}
		for i, l := range in.Links {
			if err := configfs.CheckLink(l); err != nil {
				return fmt.Errorf("link %d: %w", i+1, err)
			}
		}
	} else if err := configfs.CheckPortalID(in.ID); err != nil {
		return err
	}
	return nil
}

// batchFile is the content of a batch file.
type batchFile struct {
	Version int             `json:"version"`
	Seq     uint64          `json:"seq"`
	Intents []rebind.Intent `json:"intents"`
}

// readBatch reads the batch file name: its version, its sequence (which
// must be its name's), each intent checked as a single entry is.
func (s *Store) readBatch(name string) ([]rebind.Intent, error) {
	seq, ok := batchSeq(name)
	if !ok || batchName(seq) != name {
		return nil, errors.New("not a batch file name (batch-<20 digits>.json)")
	}
	b, err := readEntry(filepath.Join(s.journal, name), maxBatchBytes)
	if err != nil {
		return nil, err
	}
	var bf batchFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&bf); err != nil {
		return nil, fmt.Errorf("unreadable (%v)", err)
	}
	if bf.Version != batchVersion {
		return nil, fmt.Errorf("batch version %d, this build reads %d", bf.Version, batchVersion)
	}
	if bf.Seq != seq {
		return nil, fmt.Errorf("batch sequence %d, which does not match its file name", bf.Seq)
	}
	if len(bf.Intents) == 0 {
		return nil, errors.New("batch without intents")
	}
	for i, in := range bf.Intents {
		if err := checkIntent(in); err != nil {
			return nil, fmt.Errorf("intent %d (%s %q): %w", i+1, in.Kind, in.ID, err)
		}
	}
	return bf.Intents, nil
}
