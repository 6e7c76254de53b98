// Package status renders what the engine knows for people and programs:
// the JSON contract of `nvmet-rebind status --json` (field names are
// stable, SchemaVersion), the table of `status`, and the verdict of `check`
// in the monitoring-plugin convention (check.go: exit codes 0-3, a status
// line with perf data, then details).
package status

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// SchemaVersion is the version of the `status --json` contract: 2 added
// schema_version, a state that is always set, heal, gave_up, configfs,
// addresses_error and unreadable. Fields are only ever added; listening
// stays one release more, then goes (read state).
const SchemaVersion = 2

// The states of `status --json`'s "state", always set:
//
//   - listening: LISTEN on the RDMA device that carries the address
//   - dead: no LISTEN entry
//   - stranded: LISTEN on a device that no longer carries the address
//   - unknown: the cm_id table could not be read (RDMA netlink)
//   - none: the object could have an RDMA listener, none is expected and
//     the kernel has none (an nvmet port with no subsystem linked, a portal
//     with iser=0)
//   - not-applicable: the object has no RDMA listener to judge (another
//     transport, no usable address, unreadable, or only in a saved config)
const (
	StateListening     = "listening"
	StateDead          = "dead"
	StateStranded      = "stranded"
	StateUnknown       = "unknown"
	StateNone          = "none"
	StateNotApplicable = "not-applicable"
)

// ListenerStatus is one line of `status --json`. The field names are a
// contract that scripts use: keep them stable.
type ListenerStatus struct {
	Kind    string `json:"kind"`    // "nvmet" or "lio"
	ID      string `json:"id"`      // port id, or <iqn>/<tpgt_N>/<np>
	Address string `json:"address"` // "192.0.2.1", "2001:db8::1"
	Service string `json:"service"` // "4420"
	Managed bool   `json:"managed"`
	Reason  string `json:"reason"`
	// Listening is the state as a tri-state (null: unknown, or nothing to
	// judge). Deprecated in schema 2, kept for one release: read State.
	Listening *bool  `json:"listening"`
	Device    string `json:"device"` // RDMA device of the LISTEN entry, else the one that would carry the address
	Netdev    string `json:"netdev"`
	// Endpoint is the kernel listener the object holds: "<owner> <addr>:<port>".
	Endpoint string `json:"endpoint,omitempty"`
	// Transport is how an nvmet port listens: "rdma" or "tcp" (empty for
	// other transports and for LIO portals).
	Transport string `json:"transport,omitempty"`
	// Sharers counts the configfs objects holding that listener (LIO
	// portals of several targets on one address:port share one).
	Sharers int `json:"sharers,omitempty"`
	// State is one of the State* names, always set (a report of schema 1
	// has "" for none and not-applicable).
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
	// Heal is the heal that runs next for the object, now that nothing
	// holds it back (an action: rebind, toggle-iser, complete-relink, …);
	// empty when none is due.
	Heal string `json:"heal,omitempty"`
	// GaveUp: down for more than give_up_after; not healed until a reload
	// or a manual rebind.
	GaveUp bool `json:"gave_up,omitempty"`
	// Missing: a saved config declares the object and configfs lacks it.
	Missing bool `json:"missing,omitempty"`
	// History is the object's last heals (rebind.HistoryLen), oldest
	// first, as the daemon keeps them in memory since it started.
	History []HealRecord `json:"history,omitempty"`
}

// HealRecord is one heal of an object's history (rebind.Outcome).
type HealRecord struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"`
	// Result is ok, refused, error, unverified, or none (a journal drop:
	// nothing to verify).
	Result    string   `json:"result"`
	LatencyMS *float64 `json:"latency_ms,omitempty"` // first write to LISTEN verified
	Error     string   `json:"error,omitempty"`
}

// healRecord renders one outcome of a history.
func healRecord(o rebind.Outcome) HealRecord {
	h := HealRecord{At: o.At, Action: o.Action.String(), Result: o.Result.String()}
	if h.Result == "" {
		h.Result = "none"
	}
	if o.Latency > 0 {
		h.LatencyMS = ptr(float64(o.Latency.Microseconds()) / 1000)
	}
	if o.Err != nil {
		h.Error = o.Err.Error()
	}
	return h
}

// ConfigfsStatus is what the configfs root showed (rebind.ConfigfsSight).
type ConfigfsStatus struct {
	Root string `json:"root"`
	// Error says why nothing under the root can be seen.
	Error   string `json:"error,omitempty"`
	Mounted bool   `json:"mounted"` // a configfs mount
	Nvmet   bool   `json:"nvmet"`   // <root>/nvmet exists: nvmet is loaded
	LIO     bool   `json:"lio"`     // <root>/target/iscsi exists: LIO iSCSI is loaded
	// NvmetWanted and LIOWanted: the config (a saved config) or the
	// journal names objects of that kind.
	NvmetWanted bool `json:"nvmet_wanted,omitempty"`
	LIOWanted   bool `json:"lio_wanted,omitempty"`
}

// NotSeen says why nothing under the root can be seen ("" when something
// can): the root itself (Error), or neither tree loaded. check judges it
// UNKNOWN; status and plan exit 2 on it.
func (c *ConfigfsStatus) NotSeen() string {
	switch {
	case c == nil:
		return ""
	case c.Error != "":
		return "configfs: " + c.Error
	case !c.Nvmet && !c.LIO:
		return fmt.Sprintf("neither nvmet nor LIO iSCSI is loaded (no %s/nvmet, no %s/target/iscsi)", c.Root, c.Root)
	}
	return ""
}

// StatusReport is the whole of `status --json`.
type StatusReport struct {
	SchemaVersion int              `json:"schema_version"`
	Listeners     []ListenerStatus `json:"listeners"`
	// ListenersError says why listening is unknown (no RDMA netlink).
	ListenersError string `json:"listeners_error,omitempty"`
	// AddressesError says why the netdevs' addresses are unknown: no heal
	// runs.
	AddressesError string `json:"addresses_error,omitempty"`
	// Configfs is what the root showed; absent when nothing was probed
	// (a daemon of schema 1).
	Configfs *ConfigfsStatus `json:"configfs,omitempty"`
	// Unreadable are the objects the engine might manage that could not
	// be read whole: never judged, never healed.
	Unreadable    []string `json:"unreadable,omitempty"`
	JournalErrors []string `json:"journal_errors,omitempty"`
	// SavedConfigsError names the saved configs, and their entries, that
	// could not be read or were refused.
	SavedConfigsError string `json:"saved_configs_error,omitempty"`
	// BootWindowUntil is when the saved configs' boot window closes
	// (absent: no saved config named).
	BootWindowUntil *time.Time `json:"boot_window_until,omitempty"`
	// SavedMissing are the objects nvmetcli's saved config declares
	// (hosts, subsystems, namespaces and their enable, allowed hosts,
	// ports, ANA groups, referrals) that configfs lacks, with what each
	// waits for; SavedDiffers the objects that exist with other
	// attributes than the file's (never changed).
	SavedMissing []SavedObject `json:"saved_missing,omitempty"`
	SavedDiffers []string      `json:"saved_differs,omitempty"`
	// Config is the daemon's trouble with its config (check.go:
	// ConfigStatus): a refused reload, [boot] files unreadable. Absent
	// when there is none, and without a daemon.
	Config *ConfigStatus `json:"config,omitempty"`
	Source string        `json:"source"` // "daemon" or "direct"
	At     time.Time     `json:"at"`
}

// SavedObject is one declared object configfs lacks.
type SavedObject struct {
	Object  string `json:"object"` // its path under nvmet/ (…#enable: the namespace's enable)
	Waiting string `json:"waiting"`
}

// Report renders a snapshot; what it could and could not see is the
// snapshot's Sight.
func Report(s rebind.Snapshot, source string) StatusReport {
	r := StatusReport{SchemaVersion: SchemaVersion, Listeners: []ListenerStatus{}, Source: source, At: s.At}
	sg := s.Sight
	if sg.Netlink == nil {
		sg.Netlink = s.ListenersErr // a snapshot made by hand (tests)
	}
	if sg.Netlink != nil {
		r.ListenersError = sg.Netlink.Error()
	}
	if sg.Addrs != nil {
		r.AddressesError = sg.Addrs.Error()
	}
	if c := sg.Configfs; c.Probed {
		r.Configfs = &ConfigfsStatus{Root: c.Root, Mounted: c.Mounted, Nvmet: c.Nvmet, LIO: c.LIO,
			NvmetWanted: sg.NvmetWanted, LIOWanted: sg.LIOWanted}
		if c.Err != nil {
			r.Configfs.Error = c.Err.Error()
		}
	}
	r.Unreadable = slices.Clone(sg.Unreadable)
	var savedErrs []string
	for _, err := range []error{sg.Saved, s.Completion.Err} {
		if err == nil {
			continue
		}
		for _, l := range strings.Split(err.Error(), "\n") {
			if !slices.Contains(savedErrs, l) {
				savedErrs = append(savedErrs, l) // both read the same file's ports
			}
		}
	}
	r.SavedConfigsError = strings.Join(savedErrs, "\n")
	for _, p := range s.Completion.Missing {
		r.SavedMissing = append(r.SavedMissing, SavedObject{Object: p.Object, Waiting: p.Waiting})
	}
	r.SavedDiffers = slices.Clone(s.Completion.Differs)
	if !sg.BootUntil.IsZero() {
		r.BootWindowUntil = ptr(sg.BootUntil)
	}
	for _, e := range s.JournalErrs {
		r.JournalErrors = append(r.JournalErrors, e.Error())
	}
	for _, it := range s.Items {
		ls := ListenerStatus{
			Kind: it.Kind.String(), ID: it.ID, Service: it.ServiceString(), Managed: it.Managed,
			Reason: it.Reason, Listening: it.Listening(), Device: it.Device, Netdev: it.Netdev, Expected: it.Expected,
			Sharers: it.Sharers, State: stateName(it), RDMADevice: it.Carrier, RDMAPort: it.CarrierPort, GaveUp: it.GaveUp, Missing: it.Missing,
		}
		if it.Action != rebind.ActNone && it.Action != rebind.ActDropJournal {
			ls.Heal = it.Action.String()
		}
		if it.Endpoint.Addr.IsValid() {
			ls.Endpoint = it.Endpoint.String()
		}
		switch it.Endpoint.Kind {
		case rebind.KindNvmet:
			ls.Transport = "rdma"
		case rebind.KindTCP:
			ls.Transport = "tcp"
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
		if res, ok := s.Last(it.Key); ok {
			ls.LastAction = res.Action.String()
			ls.LastAt = ptr(res.At)
			if res.Err != nil {
				ls.LastResult = res.Err.Error()
			} else {
				ls.LastResult = "ok"
				ls.LatencyMS = ptr(float64(res.Latency.Microseconds()) / 1000)
			}
		}
		for _, o := range s.History[it.Key] {
			ls.History = append(ls.History, healRecord(o))
		}
		r.Listeners = append(r.Listeners, ls)
	}
	return r
}

// stateName is the item's state as `status --json` names it.
func stateName(it rebind.Item) string {
	if it.State != rebind.StateNone {
		return it.State.String()
	}
	if it.Endpoint.Addr.IsValid() {
		return StateNone
	}
	return StateNotApplicable
}

// parseState reads a report's state, of schema 2 or 1 ("" for none).
func parseState(name string) rebind.State {
	switch name {
	case "", StateNone, StateNotApplicable:
		return rebind.StateNone
	}
	return rebind.ParseState(name)
}

func ptr[T any](v T) *T { return &v }

// WriteTable prints the report as `nvmet-rebind status -o wide` shows it:
// every column, each row on one line however long (WriteFitted fits a
// width). Names
// and texts read from the system are rendered safely: a name holding a
// control character (a newline, a tab) is quoted as Go quotes it, free
// text has its control characters escaped, so no row is broken or hidden.
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
		if l.State == StateListening || l.State == StateStranded {
			on = dash(quoteName(l.Device))
		}
		carried := "-"
		if l.RDMADevice != "" {
			carried = quoteName(l.RDMADevice) + "/" + strconv.Itoa(int(l.RDMAPort))
		}
		kind := l.Kind
		if l.Transport == "tcp" {
			kind += "-tcp" // the table's one column for what listens
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", quoteName(kind), quoteName(l.ID), dash(escape(addr)),
			dash(escape(l.State)), sharers, on, carried, dash(quoteName(l.Netdev)), yesNo(l.Managed), escape(last), retry, escape(l.Reason))
	}
	fmt.Fprintf(w, "\n(source: %s)\n", escape(r.Source))
	if err := w.Flush(); err != nil {
		return err
	}
	var trailer strings.Builder
	if r.ListenersError != "" {
		fmt.Fprintf(&trailer, "\nlistening is unknown: %s\n", escape(r.ListenersError))
	}
	writeTrailer(&trailer, r)
	_, err := io.WriteString(out, trailer.String())
	return err
}

// writeTrailer writes what follows either table: what the report could
// not see and the saved configs' differences.
func writeTrailer(trailer *strings.Builder, r StatusReport) {
	for _, n := range unseen(r) {
		fmt.Fprintf(trailer, "\nnot seen: %s\n", escape(n))
	}
	if n := len(r.SavedMissing); n > 0 {
		fmt.Fprintf(trailer, "\ndeclared by the saved config, not in configfs (%d):\n", n)
		for _, m := range r.SavedMissing {
			fmt.Fprintf(trailer, "  %s: %s\n", escape(m.Object), escape(m.Waiting))
		}
	}
	for _, d := range r.SavedDiffers {
		fmt.Fprintf(trailer, "\ndiffers from the saved config (left as it is): %s\n", escape(d))
	}
}

// unseen lists what the report could not see, beyond the listeners'
// state, for the table's trailer.
func unseen(r StatusReport) []string {
	var ns []string
	if c := r.Configfs; c != nil {
		switch {
		case c.Error != "":
			ns = append(ns, "configfs: "+c.Error)
		case !c.Nvmet && !c.LIO:
			ns = append(ns, "neither nvmet nor LIO iSCSI is loaded (no "+c.Root+"/nvmet, no "+c.Root+"/target/iscsi)")
		}
	}
	if r.AddressesError != "" {
		ns = append(ns, "netdev addresses: "+r.AddressesError)
	}
	for _, u := range r.Unreadable {
		ns = append(ns, "unreadable: "+u)
	}
	return ns
}

// escape renders control characters, other unprintable runes and invalid
// UTF-8 as strconv.Quote does (\n, \t, \x00, \u202e), leaving the rest as
// it is: free text on one line.
func escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r != ' ' && !strconv.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsEscape(s string) bool {
	for _, r := range s {
		if r != ' ' && !strconv.IsPrint(r) || r == utf8.RuneError {
			return true
		}
	}
	return false
}

// quoteName renders a name read from the system: as it is, or quoted as
// Go quotes strings when it holds anything escape would change (so that
// "a\nb" is never confused with a name spelled a\nb).
func quoteName(s string) string {
	if !needsEscape(s) {
		return s
	}
	return strconv.Quote(s)
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
