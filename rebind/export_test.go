package rebind

import (
	"fmt"
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
}

// WithoutActionableCheck turns the check off (benchmarks: it plans every
// object before the first write) until the returned function is called.
func WithoutActionableCheck() (restore func()) {
	c := checkActionable
	checkActionable = nil
	return func() { checkActionable = c }
}
