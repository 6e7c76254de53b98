package tests

import (
	"slices"
	"testing"
)

// NVMET_REBIND_E2E_REPEAT runs the selection in rounds, the repetitions
// named name@N (the guest finds name's script by cutting at @).
func TestSelectScenariosRepeat(t *testing.T) {
	all := []string{"smoke", "flapping", "bench", "vlan"}
	t.Setenv(envBench, "")
	t.Setenv(envScenarios, "^(smoke|flapping)$")
	t.Setenv(envRepeat, "3")
	got := selectScenarios(t, all)
	want := []string{"smoke", "flapping", "smoke@2", "flapping@2", "smoke@3", "flapping@3"}
	if !slices.Equal(got, want) {
		t.Errorf("REPEAT=3: %q, want %q", got, want)
	}
	t.Setenv(envRepeat, "")
	if got := selectScenarios(t, all); !slices.Equal(got, []string{"smoke", "flapping"}) {
		t.Errorf("no REPEAT: %q", got)
	}
}
