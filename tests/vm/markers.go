package vm

import (
	"regexp"
	"strconv"
	"strings"
)

// Result is one scenario's verdict as the guest printed it:
// "E2E RESULT <name> PASS|FAIL|SKIP <detail>".
type Result struct {
	Name   string
	Status string
	Detail string
}

// Metric is one "E2E METRIC <name> <key>=<value>" line.
type Metric struct {
	Key, Value string
}

// Events is everything the markers on the console said.
type Events struct {
	Results map[string]Result
	Order   []string            // scenario names in the order they reported
	Metrics map[string][]Metric // by scenario
	Logs    map[string][]string // console lines between E2E BEGIN and E2E RESULT
	Init    bool                // the guest's /init ran (E2E INIT): the kernel reached userspace
	Done    bool
	RC      int
	Info    []string            // E2E INFO lines
	Warns   map[string][]string // E2E WARN <name> <text>, by scenario
}

var (
	reResult = regexp.MustCompile(`E2E RESULT (\S+) (PASS|FAIL|SKIP)\b ?(.*)$`)
	reMetric = regexp.MustCompile(`E2E METRIC (\S+) ([^=\s]+)=(\S*)`)
	reBegin  = regexp.MustCompile(`E2E BEGIN (\S+)`)
	reDone   = regexp.MustCompile(`E2E DONE rc=(-?\d+)`)
	reInit   = regexp.MustCompile(`E2E INIT\b`)
	reInfo   = regexp.MustCompile(`E2E INFO (.*)$`)
	reWarn   = regexp.MustCompile(`E2E WARN (\S+) (.*)$`)
)

// ParseConsole extracts the markers from a console log. Markers may appear
// anywhere in a line (kernel messages can be interleaved with them).
func ParseConsole(console []byte) Events {
	ev := Events{Results: map[string]Result{}, Metrics: map[string][]Metric{}, Logs: map[string][]string{}, Warns: map[string][]string{}, RC: -1}
	current := ""
	for _, line := range strings.Split(string(console), "\n") {
		line = strings.TrimRight(line, "\r")
		if m := reBegin.FindStringSubmatch(line); m != nil {
			current = m[1]
			ev.Logs[current] = nil
			continue
		}
		if current != "" {
			ev.Logs[current] = append(ev.Logs[current], line)
		}
		if m := reResult.FindStringSubmatch(line); m != nil {
			if _, seen := ev.Results[m[1]]; !seen {
				ev.Order = append(ev.Order, m[1])
			}
			ev.Results[m[1]] = Result{Name: m[1], Status: m[2], Detail: strings.TrimSpace(m[3])}
			if m[1] == current {
				current = ""
			}
			continue
		}
		if m := reMetric.FindStringSubmatch(line); m != nil {
			ev.Metrics[m[1]] = append(ev.Metrics[m[1]], Metric{Key: m[2], Value: m[3]})
			continue
		}
		if reInit.MatchString(line) {
			ev.Init = true
			continue
		}
		if m := reDone.FindStringSubmatch(line); m != nil {
			ev.Done = true
			ev.RC, _ = strconv.Atoi(m[1])
			continue
		}
		if m := reWarn.FindStringSubmatch(line); m != nil {
			ev.Warns[m[1]] = append(ev.Warns[m[1]], m[2])
			continue
		}
		if m := reInfo.FindStringSubmatch(line); m != nil {
			ev.Info = append(ev.Info, m[1])
		}
	}
	return ev
}
