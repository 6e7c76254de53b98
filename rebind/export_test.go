package rebind

import (
	"fmt"
	"reflect"
	"slices"
)

// Every engine test of this package checks that the plan of the objects
// that are not alive (what Reconcile acts on first) decides exactly the
// heals the plan of every object decides.
func init() {
	checkActionable = func(fast, full []Heal) {
		sum := func(hs []Heal) []string {
			var out []string
			for _, h := range hs {
				out = append(out, fmt.Sprintf("%v %v %v %d steps", h.Endpoint, h.Action, h.Keys, len(h.Steps)))
			}
			return out
		}
		if a, b := sum(fast), sum(full); !slices.Equal(a, b) {
			panic(fmt.Sprintf("plan of the actionable objects: %q; full plan: %q", a, b))
		}
	}
	checkSteady = func(kept []Item, p Planned, mem, learnt Memory) {
		if len(p.Heals) > 0 {
			panic(fmt.Sprintf("a round skipped its plan, which has %d heals: %+v", len(p.Heals), p.Heals[0]))
		}
		if !reflect.DeepEqual(kept, p.Items) {
			for i := range min(len(kept), len(p.Items)) {
				if !reflect.DeepEqual(kept[i], p.Items[i]) {
					panic(fmt.Sprintf("a round skipped its plan; kept item %#v, the plan's %#v", kept[i], p.Items[i]))
				}
			}
			panic(fmt.Sprintf("a round skipped its plan; kept items %v, the plan's %v", kept, p.Items))
		}
		if !reflect.DeepEqual(mem, learnt) {
			panic(fmt.Sprintf("a round skipped its plan; kept memory %+v, Learn of the plan: %+v", mem, learnt))
		}
	}
}

// WithoutActionableCheck turns both checks off (benchmarks: they plan
// every object) until the returned function is called.
func WithoutActionableCheck() (restore func()) {
	c, s := checkActionable, checkSteady
	checkActionable, checkSteady = nil, nil
	return func() { checkActionable, checkSteady = c, s }
}
