package rebind

import (
	"slices"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

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

// equal tells whether two journal entries say the same.
func (in Intent) equal(o Intent) bool {
	return in.Version == o.Version && in.Kind == o.Kind && in.ID == o.ID && in.Address == o.Address &&
		slices.Equal(in.Links, o.Links) && in.ISER == o.ISER && in.Started.Equal(o.Started)
}
