package rebind

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrNoSuchObject is a manual rebind of an id configfs does not hold.
var ErrNoSuchObject = errors.New("no such port or portal in configfs")

// ReconcileKey is the round of a manual rebind without the daemon: k's
// give-up window, backoff and graces are lifted (Retry), and every
// endpoint is observed and planned as Reconcile does, but only the heals
// that write k's objects run. Boot completion and the heals of other
// endpoints wait for a full round. An id configfs does not hold is
// refused (ErrNoSuchObject, naming the ids it holds) before anything is
// planned or written.
func (e *Engine) ReconcileKey(ctx context.Context, k Key) ([]Item, error) {
	e.Retry(k)
	return e.round(ctx, &k)
}

// Resolve checks that a round's items (what `status` shows) hold k as an
// object in configfs; else the error (ErrNoSuchObject) names those they
// hold.
func Resolve(items []Item, k Key) error {
	ids := make([]Key, 0, len(items))
	for _, it := range items {
		if it.Missing {
			continue // declared by a saved config, not in configfs
		}
		if it.Key == k {
			return nil
		}
		ids = append(ids, it.Key)
	}
	return noSuchObject(k, ids)
}

// holds is Resolve over an observation's objects.
func (o *Observed) holds(k Key) error {
	ids := make([]Key, 0, len(o.Ports)+len(o.Portals))
	for _, p := range o.Ports {
		ids = append(ids, Key{KindNvmet, p.ID})
	}
	for _, p := range o.Portals {
		ids = append(ids, Key{KindLIO, p.ID()})
	}
	for _, id := range ids {
		if id == k {
			return nil
		}
	}
	return noSuchObject(k, ids)
}

// maxNamedIDs bounds the ids an ErrNoSuchObject names.
const maxNamedIDs = 20

func noSuchObject(k Key, ids []Key) error {
	if len(ids) == 0 {
		return fmt.Errorf("%s: %w: configfs holds no port or portal", k, ErrNoSuchObject)
	}
	var ports, portals []string
	for _, id := range ids {
		if id.Kind == KindNvmet {
			ports = append(ports, id.ID)
		} else {
			portals = append(portals, id.ID)
		}
	}
	var b strings.Builder
	named := 0
	list := func(what string, names []string) {
		if len(names) == 0 {
			return
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(what)
		for i, n := range names {
			if named == maxNamedIDs {
				fmt.Fprintf(&b, " … (%d more)", len(names)-i)
				return
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(" " + n)
			named++
		}
	}
	list("nvmet ports", ports)
	list("lio portals", portals)
	return fmt.Errorf("%s: %w (the ids `nvmet-rebind status` shows: %s)", k, ErrNoSuchObject, b.String())
}
