package rebind

import (
	"iter"
	"maps"
	"reflect"
)

// decisions is every managed endpoint's decision: own, a plan's own (nil:
// the endpoint has none now), over base, a baseline's that the plan
// carries, shared and never written — so a plan of the few endpoints an
// event touched does not copy the decisions of thousands. A plan of every
// endpoint has own only. Never written once its plan is made.
type decisions struct {
	base, own map[epKey]*decision
}

// over returns decisions to be written that start as ds: ds's base
// shared, its own copied (a few; flatten bounds them).
func (ds decisions) over() decisions {
	if ds.base == nil {
		return decisions{base: ds.own, own: map[epKey]*decision{}}
	}
	return decisions{base: ds.base, own: maps.Clone(ds.own)}
}

// forget drops k's decision.
func (ds decisions) forget(k epKey) {
	if _, ok := ds.base[k]; ok {
		ds.own[k] = nil
	} else {
		delete(ds.own, k)
	}
}

// get is k's decision, nil when there is none.
func (ds decisions) get(k epKey) *decision {
	if d, ok := ds.own[k]; ok {
		return d
	}
	return ds.base[k]
}

// all yields every decision, in no order.
func (ds decisions) all() iter.Seq2[epKey, *decision] {
	return func(yield func(epKey, *decision) bool) {
		for k, d := range ds.own {
			if d != nil && !yield(k, d) {
				return
			}
		}
		for k, d := range ds.base {
			if _, mine := ds.own[k]; !mine && !yield(k, d) {
				return
			}
		}
	}
}

// flatten makes ds one map when its own has grown past maxPatch of its
// base (a plan of many endpoints): its own then shares nothing.
func (ds *decisions) flatten() {
	if ds.base == nil || len(ds.own) <= maxPatch(len(ds.base)) {
		return
	}
	flat := make(map[epKey]*decision, len(ds.base)+len(ds.own))
	for k, d := range ds.all() {
		flat[k] = d
	}
	*ds = decisions{own: flat}
}

// same tells whether ds and o are the same decisions: a carried plan
// shares its baseline's, and a decision is never changed once made.
func (ds decisions) same(o decisions) bool {
	return ds.own != nil && o.own != nil && sameMap(ds.own, o.own) && sameMap(ds.base, o.base)
}

// sameMap tells whether a and b are one map (or both nil).
func sameMap(a, b map[epKey]*decision) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
