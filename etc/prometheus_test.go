package etc

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	rulesPath     = "prometheus/nvmet-rebind.rules.yml"
	rulesTestPath = "prometheus/nvmet-rebind.rules.test.yml"
)

// alertNames lists the `- alert: Name` entries of a rules file, or the
// `alertname: Name` entries of a promtool test file.
func alertNames(t *testing.T, path, key string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:- )?`+key+`: (\w+)\s*$`).FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// Every alert has a promtool test and is explained in the README's Fleet
// section, and the metrics the rules use are the ones the daemon exports.
func TestAlertsCovered(t *testing.T) {
	t.Parallel()
	alerts := alertNames(t, rulesPath, "alert")
	if len(alerts) < 5 {
		t.Fatalf("%d alerts in %s: %v", len(alerts), rulesPath, alerts)
	}
	tested := alertNames(t, rulesTestPath, "alertname")
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, fleet, _ := strings.Cut(string(readme), "\n## Fleet\n")
	fleet, _, _ = strings.Cut(fleet, "\n## ")
	for _, a := range alerts {
		if !slices.Contains(tested, a) {
			t.Errorf("alert %s has no test in %s", a, rulesTestPath)
		}
		if !strings.Contains(fleet, a) {
			t.Errorf("alert %s is not explained in README.md's Fleet section", a)
		}
	}
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := os.ReadFile("../rebind/metrics/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`nvmet_rebind_(\w+)`).FindAllStringSubmatch(string(rules), -1) {
		if !strings.Contains(string(metrics), `ns+"_`+m[1]+`"`) {
			t.Errorf("the rules use %s, which rebind/metrics does not export", m[0])
		}
	}
}

// TestAlertRules runs `promtool check rules` and `promtool test rules`
// (Debian's prometheus package ships promtool; as root it is installed,
// without starting the server).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool := ensureTool(t, "promtool", "prometheus")
	if out, err := exec.Command(promtool, "check", "rules", rulesPath).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	out, err := exec.Command(promtool, "test", "rules", rulesTestPath).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}
