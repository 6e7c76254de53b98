package configfs

import (
	"strings"
	"testing"
)

// ComparePortals must order exactly as comparing the IDs does
// (characters below '/' in an IQN decide differently field by field).
func TestComparePortalIDs(t *testing.T) {
	parts := []string{"", "a", "a-b", "a.b", "a/b", "ab", "a0", "tpgt_1", "tpgt_10", "1.2.3.4:3260", "[::1]:3260"}
	var ps []Portal
	for _, i := range parts {
		for _, tpg := range parts[:4] {
			for _, np := range parts[:5] {
				ps = append(ps, Portal{IQN: i, TPG: tpg, NP: np})
			}
		}
	}
	for _, a := range ps {
		for _, b := range ps {
			if got, want := ComparePortals(a, b), strings.Compare(a.ID(), b.ID()); got != want {
				t.Fatalf("ComparePortals(%q, %q) = %d, strings.Compare = %d", a.ID(), b.ID(), got, want)
			}
		}
	}
}
