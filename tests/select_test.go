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

// The default plan: every scenario on 6.12 and newest (the scale ones on
// newest alone), the representative ones on 6.1; naming kernels, or
// NVMET_REBIND_E2E_ALL=1 (which adds 6.18), runs every selected scenario
// on each.
func TestKernelPlan(t *testing.T) {
	sel := []string{"smoke", "flapping", "nvmet-reset", "flapping@2", "smoke@2", "shared-iser-scale"}
	show := func(p []kernelRun) map[string][]string {
		m := map[string][]string{}
		for _, r := range p {
			m[r.series] = r.scenarios
		}
		return m
	}
	t.Setenv(envKernels, "")
	t.Setenv(envAll, "")
	got := show(kernelPlan(sel))
	if len(got) != 3 || !slices.Equal(got["6.12"], sel[:len(sel)-1]) || !slices.Equal(got["newest"], sel) ||
		!slices.Equal(got["6.1"], []string{"smoke", "nvmet-reset", "smoke@2"}) {
		t.Errorf("default plan: %v", got)
	}
	if p := kernelPlan([]string{"flapping"}); len(p) != 2 || p[0].series != "6.12" || p[1].series != "newest" {
		t.Errorf("a kernel with nothing to run is not booted: %v", p)
	}
	t.Setenv(envAll, "1")
	all := show(kernelPlan(sel))
	for s, sc := range all {
		if !slices.Equal(sc, sel) {
			t.Errorf("ALL=1: %s runs %q", s, sc)
		}
	}
	if len(all) != 4 || all["6.18"] == nil {
		t.Errorf("ALL=1: kernels %v, want 6.18 with the default ones", all)
	}
	if k := systemdKernels("bookworm"); len(k) != 4 {
		t.Errorf("ALL=1: systemd on %q", k)
	}
	t.Setenv(envAll, "")
	t.Setenv(envKernels, "6.1 7.3")
	if p := kernelPlan(sel); len(p) != 2 || p[0].series != "6.1" || !slices.Equal(p[0].scenarios, sel) || p[1].series != "7.3" {
		t.Errorf("named kernels: %v", p)
	}
	if k := systemdKernels("trixie"); !slices.Equal(k, []string{"6.1", "7.3"}) {
		t.Errorf("named kernels: systemd on %q", k)
	}
	t.Setenv(envKernels, "")
	if k := systemdKernels("bookworm"); !slices.Equal(k, []string{"6.1"}) {
		t.Errorf("default: Debian 12 on %q", k)
	}
	if k := systemdKernels("trixie"); !slices.Equal(k, []string{"6.12"}) {
		t.Errorf("default: Debian 13 on %q", k)
	}
}
