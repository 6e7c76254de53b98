package rebind

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
	"strings"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// journalVersion is the format of intent files; others are refused.
const journalVersion = 1

// Intent is one journal entry: what a port or portal had before the engine
// started to rebind it. It is written (and synced) before the first write
// to configfs and removed once the listener is back, so that a crash at any
// point can be repaired by the next start.
type Intent struct {
	Version int             `json:"version"`
	Kind    Kind            `json:"kind"`
	ID      string          `json:"id"`
	Address string          `json:"address"`         // ip:port, to notice a port re-created by the admin
	Links   []configfs.Link `json:"links,omitempty"` // nvmet: in creation order
	ISER    bool            `json:"iser,omitempty"`  // lio: iser was 1
	Started time.Time       `json:"started"`
}

// Journal is the intent journal under <state-dir>/journal.
type Journal struct {
	dir string
}

// OpenJournal creates <stateDir>/journal (mode 0700) if needed.
func OpenJournal(stateDir string) (*Journal, error) {
	dir := filepath.Join(stateDir, "journal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", stateDir, err)
	}
	for _, d := range []string{stateDir, dir} {
		st, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("state dir %s: %w", d, err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(d, 0o700); err != nil {
				return nil, fmt.Errorf("state dir %s: mode %v: %w", d, st.Mode().Perm(), err)
			}
		}
	}
	return &Journal{dir: dir}, nil
}

// Dir is the journal directory.
func (j *Journal) Dir() string { return j.dir }

func (j *Journal) file(k Key) string {
	sum := sha256.Sum256([]byte(string(k.Kind) + "\x00" + k.ID))
	return filepath.Join(j.dir, string(k.Kind)+"-"+hex.EncodeToString(sum[:12])+".json")
}

// Put writes an intent durably: temp file, fsync, rename, fsync dir.
func (j *Journal) Put(in Intent) error {
	in.Version = journalVersion
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	k := Key{in.Kind, in.ID}
	f, err := os.CreateTemp(j.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("journal %s: %w", k, err)
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
		werr = os.Rename(tmp, j.file(k))
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal %s: %w", k, werr)
	}
	return j.syncDir()
}

func (j *Journal) syncDir() error {
	d, err := os.Open(j.dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("journal: sync %s: %w", j.dir, err)
	}
	return nil
}

// Delete removes the intent for k; a missing one is not an error.
func (j *Journal) Delete(k Key) error {
	if err := os.Remove(j.file(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("journal %s: %w", k, err)
	}
	return j.syncDir()
}

// Load reads every intent. Unreadable entries (torn, empty, garbage, wrong
// version) are moved aside to <name>.corrupt and reported in bad; they are
// never acted on.
func (j *Journal) Load() (map[Key]Intent, []error) {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, []error{fmt.Errorf("journal %s: %w", j.dir, err)}
	}
	out := map[Key]Intent{}
	var bad []error
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			os.Remove(filepath.Join(j.dir, name)) // a crash before rename: never committed
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		path := filepath.Join(j.dir, name)
		in, err := readIntent(path)
		if err == nil && j.file(Key{in.Kind, in.ID}) != path {
			err = fmt.Errorf("entry names %s %q, which does not match its file name", in.Kind, in.ID)
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("journal entry %s: %w; moved aside to %s.corrupt", path, err, name))
			if rerr := os.Rename(path, path+".corrupt"); rerr != nil {
				bad = append(bad, fmt.Errorf("journal entry %s: %w", path, rerr))
			}
			continue
		}
		out[Key{in.Kind, in.ID}] = in
	}
	return out, bad
}

func readIntent(path string) (Intent, error) {
	f, err := os.Open(path)
	if err != nil {
		return Intent{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return Intent{}, err
	}
	var in Intent
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return Intent{}, fmt.Errorf("unreadable (%v)", err)
	}
	if in.Version != journalVersion {
		return Intent{}, fmt.Errorf("version %d, this build reads %d", in.Version, journalVersion)
	}
	switch in.Kind {
	case KindNvmet:
		if len(in.Links) == 0 {
			return Intent{}, errors.New("nvmet entry without links")
		}
	case KindLIO:
		if !in.ISER {
			return Intent{}, errors.New("lio entry without iser")
		}
	default:
		return Intent{}, fmt.Errorf("unknown kind %q", in.Kind)
	}
	if in.ID == "" {
		return Intent{}, errors.New("entry without id")
	}
	return in, nil
}
