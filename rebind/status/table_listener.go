package status

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteListener prints one listener in full, as `nvmet-rebind status <id>`
// shows it: every field of its ListenerStatus on a line of its own, named
// as `status --json` names it, then the history of its last heals.
func WriteListener(out io.Writer, r StatusReport, l ListenerStatus) error {
	var b strings.Builder
	field := func(name, value string) {
		writeWrapped(&b, value, fmt.Sprintf("%-16s ", name+":"), strings.Repeat(" ", 17), Width)
	}
	field("kind", quoteName(l.Kind))
	field("id", quoteName(l.ID))
	field("address", dash(escape(l.Address)))
	field("service", dash(escape(l.Service)))
	field("managed", yesNo(l.Managed))
	field("reason", dash(escape(l.Reason)))
	field("listening", YesNo(l.Listening))
	field("device", dash(quoteName(l.Device)))
	field("netdev", dash(quoteName(l.Netdev)))
	field("endpoint", dash(escape(l.Endpoint)))
	field("transport", dash(escape(l.Transport)))
	field("sharers", strconv.Itoa(l.Sharers))
	field("state", dash(escape(l.State)))
	field("rdma_device", dash(quoteName(l.RDMADevice)))
	rdmaPort := "-"
	if l.RDMADevice != "" {
		rdmaPort = strconv.FormatUint(uint64(l.RDMAPort), 10)
	}
	field("rdma_port", rdmaPort)
	field("expected", yesNo(l.Expected))
	field("dead_since", when(l.DeadSince))
	field("last_action", dash(escape(l.LastAction)))
	field("last_result", dash(escape(l.LastResult)))
	field("last_action_at", when(l.LastAt))
	field("last_latency_ms", millis(l.LatencyMS))
	field("retry_at", when(l.RetryAt))
	field("heal", dash(escape(l.Heal)))
	field("gave_up", yesNo(l.GaveUp))
	field("missing", yesNo(l.Missing))
	switch {
	case len(l.History) > 0:
		fmt.Fprintf(&b, "\nhistory (the last %d heals, oldest first):\n", len(l.History))
		fmt.Fprintf(&b, "  %-19s  %-15s  %-10s  %9s  %s\n", "AT", "ACTION", "RESULT", "LATENCY", "ERROR")
		for _, h := range l.History {
			line := fmt.Sprintf("  %s  %-15s  %-10s  %9s  ", h.At.Local().Format(time.DateTime), escape(h.Action), escape(h.Result), millis(h.LatencyMS))
			if h.Error == "" {
				b.WriteString(strings.TrimRight(line, " ") + "\n")
				continue
			}
			writeWrapped(&b, escape(h.Error), line, strings.Repeat(" ", len(line)), Width)
		}
	case r.Source == "daemon":
		b.WriteString("\nhistory: no heal since the daemon started\n")
	default:
		b.WriteString("\nhistory: none here (the daemon keeps it in memory, and no daemon answered)\n")
	}
	fmt.Fprintf(&b, "\n(source: %s)\n", escape(r.Source))
	_, err := io.WriteString(out, b.String())
	return err
}

// when renders a time of a listener, local, to the second.
func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime + " MST")
}

func millis(ms *float64) string {
	if ms == nil {
		return "-"
	}
	return strconv.FormatFloat(*ms, 'f', -1, 64) + " ms"
}
