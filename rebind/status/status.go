// Package status renders what the engine knows for people and programs:
// the JSON contract of `nvmet-rebind status --json` (field names are
// stable), the table of `status`, and the verdict of `check` (exit codes).
package status

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// ListenerStatus is one line of `status --json`. The field names are a
// contract that scripts use: keep them stable.
type ListenerStatus struct {
	Kind      string `json:"kind"`    // "nvmet" or "lio"
	ID        string `json:"id"`      // port id, or <iqn>/<tpgt_N>/<np>
	Address   string `json:"address"` // "192.0.2.1", "2001:db8::1"
	Service   string `json:"service"` // "4420"
	Managed   bool   `json:"managed"`
	Reason    string `json:"reason"`
	Listening *bool  `json:"listening"` // null: unknown
	Device    string `json:"device"`    // RDMA device of the LISTEN entry, else the one that would carry the address
	Netdev    string `json:"netdev"`
	// Endpoint is the kernel listener the object holds: "<owner> <addr>:<port>".
	Endpoint string `json:"endpoint,omitempty"`
	// Sharers counts the configfs objects holding that listener (LIO
	// portals of several targets on one address:port share one).
	Sharers int `json:"sharers,omitempty"`
	// State: "listening", "dead", "stranded" (LISTEN on a device that no
	// longer carries the address), "unknown", or "" when nothing is expected.
	State string `json:"state"`
	// RDMADevice and RDMAPort carry the address now (the GID table).
	RDMADevice string     `json:"rdma_device"`
	RDMAPort   uint32     `json:"rdma_port"`
	Expected   bool       `json:"expected"` // a listener should exist (links, iser=1)
	DeadSince  *time.Time `json:"dead_since,omitempty"`
	LastAction string     `json:"last_action,omitempty"`
	LastResult string     `json:"last_result,omitempty"`
	LastAt     *time.Time `json:"last_action_at,omitempty"`
	LatencyMS  *float64   `json:"last_latency_ms,omitempty"`
	RetryAt    *time.Time `json:"retry_at,omitempty"`
}

// StatusReport is the whole of `status --json`.
type StatusReport struct {
	Listeners []ListenerStatus `json:"listeners"`
	// ListenersError says why listening is unknown (no RDMA netlink).
	ListenersError string    `json:"listeners_error,omitempty"`
	JournalErrors  []string  `json:"journal_errors,omitempty"`
	Source         string    `json:"source"` // "daemon" or "direct"
	At             time.Time `json:"at"`
}

// Report renders a snapshot.
func Report(s rebind.Snapshot, source string) StatusReport {
	r := StatusReport{Listeners: []ListenerStatus{}, Source: source, At: s.At}
	if s.ListenersErr != nil {
		r.ListenersError = s.ListenersErr.Error()
	}
	for _, e := range s.JournalErrs {
		r.JournalErrors = append(r.JournalErrors, e.Error())
	}
	for _, it := range s.Items {
		ls := ListenerStatus{
			Kind: it.Kind.String(), ID: it.ID, Service: it.ServiceString(), Managed: it.Managed,
			Reason: it.Reason, Listening: it.Listening(), Device: it.Device, Netdev: it.Netdev, Expected: it.Expected,
			Sharers: it.Sharers, State: it.State.String(), RDMADevice: it.Carrier, RDMAPort: it.CarrierPort,
		}
		if it.Endpoint.Addr.IsValid() {
			ls.Endpoint = it.Endpoint.String()
		}
		if it.Address.IsValid() {
			ls.Address = it.Address.String()
		}
		if !it.DeadSince.IsZero() {
			ls.DeadSince = ptr(it.DeadSince)
		}
		if !it.RetryAt.IsZero() {
			ls.RetryAt = ptr(it.RetryAt)
		}
		if res, ok := s.Results[it.Key]; ok {
			ls.LastAction = res.Action.String()
			ls.LastAt = ptr(res.At)
			if res.Err != nil {
				ls.LastResult = res.Err.Error()
			} else {
				ls.LastResult = "ok"
				ls.LatencyMS = ptr(float64(res.Latency.Microseconds()) / 1000)
			}
		}
		r.Listeners = append(r.Listeners, ls)
	}
	return r
}

// Health is the verdict of `check`.
type Health int

// Health values map to exit codes.
const (
	Healthy Health = 0 // every managed, expected listener is alive
	Dead    Health = 1 // at least one is dead
	Unknown Health = 2 // cannot tell
)

// Check judges a report from each listener's state (rebind.State.Health,
// what the metrics count too): dead wins over unknown.
func Check(r StatusReport) (Health, []string) {
	h := Healthy
	var why []string
	for _, l := range r.Listeners {
		switch hl := rebind.ParseState(l.State).Health(l.Managed, l.Expected); hl {
		case rebind.HealthNone, rebind.HealthAlive:
		case rebind.HealthUnknown:
			if h == Healthy {
				h = Unknown
			}
			why = append(why, l.Kind+" "+l.ID+": listening unknown")
		default:
			h = Dead
			why = append(why, l.Kind+" "+l.ID+" ("+l.Address+":"+l.Service+"): "+hl.String()+": "+l.Reason)
		}
	}
	return h, why
}

func ptr[T any](v T) *T { return &v }

// WriteTable prints the report as `nvmet-rebind status` shows it.
func WriteTable(out io.Writer, r StatusReport) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tID\tADDRESS\tSTATE\tSHARERS\tLISTENER ON\tCARRIED BY\tNETDEV\tMANAGED\tLAST ACTION\tRETRY\tREASON")
	for _, l := range r.Listeners {
		addr := l.Address
		if l.Service != "" {
			addr = net.JoinHostPort(l.Address, l.Service)
		}
		last := "-"
		if l.LastAction != "" {
			last = l.LastAction + ": " + l.LastResult
			if l.LastAt != nil {
				last += " (" + l.LastAt.Local().Format(time.TimeOnly) + ")"
			}
		}
		retry := "-"
		if l.RetryAt != nil {
			retry = "in " + time.Until(*l.RetryAt).Round(time.Millisecond).String()
		}
		sharers := "-"
		if l.Sharers > 0 {
			sharers = strconv.Itoa(l.Sharers)
		}
		on := "-"
		if l.State == "listening" || l.State == "stranded" {
			on = dash(l.Device)
		}
		carried := "-"
		if l.RDMADevice != "" {
			carried = l.RDMADevice + "/" + strconv.Itoa(int(l.RDMAPort))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Kind, l.ID, dash(addr), dash(l.State), sharers, on, carried,
			dash(l.Netdev), yesNo(l.Managed), last, retry, l.Reason)
	}
	fmt.Fprintf(w, "\n(source: %s)\n", r.Source)
	if err := w.Flush(); err != nil {
		return err
	}
	if r.ListenersError != "" {
		_, err := fmt.Fprintf(out, "\nlistening is unknown: %s\n", r.ListenersError)
		return err
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// YesNo renders a verified fact: yes, no, or unknown (nil).
func YesNo(b *bool) string {
	if b == nil {
		return "unknown"
	}
	return yesNo(*b)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
