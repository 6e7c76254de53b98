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

// Lookup finds id, as `nvmet-rebind rebind` takes it, among the report's
// listeners. An id it lacks, or one that does not parse, is an error that
// names the ids the report has.
func Lookup(r StatusReport, id string) (ListenerStatus, error) {
	k, err := KeyOf(id)
	if err == nil {
		for _, l := range r.Listeners {
			if l.Kind == k.Kind.String() && l.ID == k.ID {
				return l, nil
			}
		}
		err = fmt.Errorf("%s: no such port or portal", k)
	}
	return ListenerStatus{}, fmt.Errorf("%w; %s", err, knownIDs(r))
}

// maxIDs bounds the ids an error names.
const maxIDs = 20

// knownIDs names the ids of a report, for an error.
func knownIDs(r StatusReport) string {
	if len(r.Listeners) == 0 {
		return "status shows no port or portal"
	}
	var ids []string
	for _, l := range r.Listeners[:min(len(r.Listeners), maxIDs)] {
		ids = append(ids, quoteName(l.ID))
	}
	s := "the ids are " + strings.Join(ids, ", ")
	if n := len(r.Listeners) - maxIDs; n > 0 {
		s += fmt.Sprintf(" and %d more (see nvmet-rebind status)", n)
	}
	return s
}
