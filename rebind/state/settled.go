package state

// What boot completion saw in place this boot (settled.json): the saved
// configs' links and iser=1 seen once, so that one the admin removes is
// never made again, by this process or the next of the same boot.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// settledFile is settled.json.
type settledFile struct {
	Boot    string         `json:"boot_id"`
	Entries []settledEntry `json:"settled"`
}

type settledEntry struct {
	Kind rebind.Kind `json:"kind"`
	ID   string      `json:"id"`
	NQN  string      `json:"nqn,omitempty"`
}

func (s *Store) settledFile() string { return filepath.Join(s.dir, "settled.json") }

// bootID names this boot; a test may set Store.BootID.
func (s *Store) bootID() string {
	if s.BootID != nil {
		return s.BootID()
	}
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// Settled reads what was settled this boot; a file of another boot (the
// restore made everything again) or none is nothing settled.
func (s *Store) Settled() (map[rebind.Settled]bool, error) {
	out := map[rebind.Settled]bool{}
	b, err := bounded.ReadFile(s.settledFile(), maxPinsBytes, false)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if be, ok := errors.AsType[*bounded.Error](err); ok {
		be.Fix = "remove it; the daemon writes a new one"
		return out, fmt.Errorf("settled %w", be)
	}
	if err != nil {
		return out, fmt.Errorf("settled %s: %w", s.settledFile(), err)
	}
	var f settledFile
	if err := json.Unmarshal(b, &f); err != nil {
		return out, fmt.Errorf("settled %s: %w", s.settledFile(), err)
	}
	if f.Boot != s.bootID() {
		return out, nil
	}
	for _, e := range f.Entries {
		out[rebind.Settled{Key: rebind.Key{Kind: e.Kind, ID: e.ID}, NQN: e.NQN}] = true
	}
	return out, nil
}

// SaveSettled replaces what was settled this boot, durably.
func (s *Store) SaveSettled(m map[rebind.Settled]bool) error {
	f := settledFile{Boot: s.bootID(), Entries: make([]settledEntry, 0, len(m))}
	for k := range m {
		f.Entries = append(f.Entries, settledEntry{Kind: k.Key.Kind, ID: k.Key.ID, NQN: k.NQN})
	}
	slices.SortFunc(f.Entries, func(a, b settledEntry) int {
		return strings.Compare(a.Kind.String()+"\x00"+a.ID+"\x00"+a.NQN, b.Kind.String()+"\x00"+b.ID+"\x00"+b.NQN)
	})
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	if err := s.writeFile(s.dir, s.settledFile(), b); err != nil {
		return fmt.Errorf("settled %s: %w", s.settledFile(), err)
	}
	return nil
}
