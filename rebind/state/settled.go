package state

// What boot completion saw in place this boot (settled.json): the saved
// configs' links and iser=1 seen once, so that one the admin removes is
// never made again, by this process or the next of the same boot.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// readBootID reads the kernel's boot id ("" where there is none).
func readBootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// Boot is this boot's id, as read when the store was opened.
func (s *Store) Boot() string { return s.boot }

// Settled reads what was settled this boot; a file of another boot (the
// restore made everything again) or none is nothing settled.
func (s *Store) Settled() (map[rebind.Settled]bool, error) {
	out := map[rebind.Settled]bool{}
	b, err := s.readFile("settled", s.settledFile(), maxPinsBytes, "remove it; the daemon writes a new one")
	if err != nil || b == nil {
		return out, err
	}
	var f settledFile
	if err := json.Unmarshal(b, &f); err != nil {
		return out, fmt.Errorf("settled %s: %w", s.settledFile(), err)
	}
	if f.Boot != s.boot {
		return out, nil
	}
	for _, e := range f.Entries {
		out[rebind.Settled{Key: rebind.Key{Kind: e.Kind, ID: e.ID}, NQN: e.NQN}] = true
	}
	return out, nil
}

// SaveSettled replaces what was settled this boot, durably.
func (s *Store) SaveSettled(m map[rebind.Settled]bool) error {
	f := settledFile{Boot: s.boot, Entries: make([]settledEntry, 0, len(m))}
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
