package state

// The device pins (pins.json): the node GUID each object was last alive on.

import (
	"encoding/json"
	"fmt"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// pinEntry is one line of pins.json.
type pinEntry struct {
	Kind rebind.Kind `json:"kind"`
	ID   string      `json:"id"`
	GUID string      `json:"node_guid"` // rdma.FormatGUID
}

func (s *Store) pinsFile() string { return filepath.Join(s.dir, "pins.json") }

// maxPinsBytes bounds pins.json (about 100 bytes an object), as
// maxBatchBytes bounds a batch of the same objects' intents.
const maxPinsBytes = maxBatchBytes

// Pins reads the device pins; a missing file is no pins. pins.json is read
// bounded, never through a symlink, and only if it is a regular file.
func (s *Store) Pins() (map[rebind.Key]uint64, error) {
	out := map[rebind.Key]uint64{}
	b, err := s.readFile("pins", s.pinsFile(), maxPinsBytes, "remove it; the daemon writes a new one when a pin changes")
	if err != nil || b == nil {
		return out, err
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
		return strings.Compare(a.Kind.String()+"\x00"+a.ID, b.Kind.String()+"\x00"+b.ID)
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
