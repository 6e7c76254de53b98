package status

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// KeyOf parses what `nvmet-rebind rebind` takes: a port id, or a portal id
// <iqn>/tpgt_<N>/<ip>:<port>.
func KeyOf(id string) (rebind.Key, error) {
	if id == "" {
		return rebind.Key{}, errors.New("give one port id or portal id (see `nvmet-rebind status`)")
	}
	if strings.Contains(id, "/") {
		if _, _, _, err := configfs.ParsePortalID(id); err != nil {
			return rebind.Key{}, err
		}
		return rebind.Key{Kind: rebind.KindLIO, ID: id}, nil
	}
	return rebind.Key{Kind: rebind.KindNvmet, ID: id}, nil
}

// Find returns the status line of k from a round's items.
func Find(items []rebind.Item, snap rebind.Snapshot, k rebind.Key) (ListenerStatus, error) {
	snap.Items = items
	for _, l := range Report(snap, "daemon").Listeners {
		if l.Kind == k.Kind.String() && l.ID == k.ID {
			return l, nil
		}
	}
	return ListenerStatus{}, fmt.Errorf("%s: no such port or portal in configfs (ids are shown by `nvmet-rebind status`)", k)
}
