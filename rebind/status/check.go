package status

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// Health is the verdict of `check`, in the monitoring-plugin convention
// (Nagios, Icinga, Sensu, Checkmk, Zabbix agents): its value is the exit
// code.
type Health int

// Healths.
const (
	OK       Health = 0 // every managed, expected listener is alive (or there are none, and everything was seen)
	Warning  Health = 1 // a heal in progress, a stranded listener within the kernel's repair grace, journal or address trouble
	Critical Health = 2 // a listener dead, stranded past the grace, or given up
	Unknown  Health = 3 // something that should have been seen was not: configfs, nvmet/LIO, RDMA netlink, objects; or an error
)

func (h Health) String() string {
	switch h {
	case OK:
		return "OK"
	case Warning:
		return "WARNING"
	case Critical:
		return "CRITICAL"
	}
	return "UNKNOWN"
}

// rank orders healths from best to worst: OK, WARNING, UNKNOWN, CRITICAL
// (a listener known dead outweighs one that cannot be seen).
func (h Health) rank() int { return [...]int{0, 1, 3, 2}[h] }

func worse(a, b Health) Health {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// ConfigStatus is the daemon's trouble with its config, kept until a
// reload succeeds (StatusReport.Config).
type ConfigStatus struct {
	// ReloadRefused says why the last reload was refused (config check's
	// reason): the daemon runs on the config it had before.
	ReloadRefused string `json:"reload_refused,omitempty"`
	// SavedUnreadable says why a saved config [boot] names could not be
	// read whole when the daemon started (missing, unreadable, malformed,
	// a bad entry): what it declares is not completed.
	SavedUnreadable string `json:"saved_unreadable,omitempty"`
}

// Counts are check's perf data.
type Counts struct {
	Alive, Dead, Stranded, Unknown int
	Managed                        int // managed listeners that should exist (the ones counted above)
	Healing                        int // down, with a heal running or due now (the daemon's)
	GaveUp                         int
	Unreadable                     int // objects that could not be read
	Missing                        int // declared by a saved config, not in configfs
}

// Verdict is what `check` prints and exits with.
type Verdict struct {
	Health  Health
	Summary string   // the status line, after "NVMET-REBIND <HEALTH> - "
	Details []string // the long output, one line each, worst first
	Counts  Counts
	// SavedComplete: saved configs are named, read whole, and everything
	// they declare is in configfs and listening (the verdict is OK).
	SavedComplete bool
	perf          bool // Counts are known (not a command error)
}

// Failed is the verdict of a check that could not get a report (the
// daemon and the direct read both failed).
func Failed(err error) Verdict {
	return Verdict{Health: Unknown, Summary: "cannot read the status: " + oneLine(err.Error())}
}

// Note adds a line to the details.
func (v *Verdict) Note(s string) { v.Details = append(v.Details, "note: "+oneLine(s)) }

// Perf renders the counts as plugin perf data (label=value, space separated).
func (v Verdict) Perf() string {
	c := v.Counts
	return fmt.Sprintf("alive=%d dead=%d stranded=%d unknown=%d managed=%d healing=%d gave_up=%d unreadable=%d missing=%d",
		c.Alive, c.Dead, c.Stranded, c.Unknown, c.Managed, c.Healing, c.GaveUp, c.Unreadable, c.Missing)
}

// StatusLine is the first line: NVMET-REBIND <HEALTH> - <summary> | <perf>.
func (v Verdict) StatusLine() string {
	line := "NVMET-REBIND " + v.Health.String() + " - " + v.Summary
	if v.perf {
		line += " | " + v.Perf()
	}
	return line
}

// Write prints the status line, then the details.
func (v Verdict) Write(w io.Writer) error {
	var b strings.Builder
	b.WriteString(v.StatusLine())
	b.WriteByte('\n')
	for _, d := range v.Details {
		b.WriteString(d)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// problem is one thing check found, with the health it makes.
type problem struct {
	h     Health
	what  string   // for the status line
	lines []string // for the details
}

// group collects the listeners of one kind of trouble for the status line.
type group struct {
	h     Health
	label string // "dead", "stranded past the repair grace", …
	names []string
}

// Check judges a report. Listeners count by their state
// (rebind.State.Health, what the metrics count too); on top of that, check
// is never OK when it could not see what it should have: the configfs
// root, the nvmet or LIO tree, the objects, the RDMA tables.
func Check(r StatusReport) Verdict {
	v := Verdict{perf: true}
	var global []problem
	var notes []string
	add := func(h Health, what string, lines ...string) { global = append(global, problem{h, what, lines}) }

	// What could not be seen.
	if c := r.Configfs; c != nil {
		switch what := c.NotSeen(); {
		case c.Error != "":
			add(Unknown, "configfs not visible: "+oneLine(c.Error), "UNKNOWN: "+oneLine(what))
		case what != "":
			add(Unknown, oneLine(what), "UNKNOWN: "+oneLine(what))
		default:
			for _, t := range []struct {
				loaded, wanted bool
				name, dir      string
			}{{c.Nvmet, c.NvmetWanted, "nvmet", "nvmet"}, {c.LIO, c.LIOWanted, "LIO iSCSI", "target/iscsi"}} {
				switch {
				case !t.loaded && t.wanted:
					what := fmt.Sprintf("%s not loaded (no %s/%s), but the journal or a saved config names %s objects", t.name, c.Root, t.dir, t.name)
					add(Unknown, oneLine(what), "UNKNOWN: "+oneLine(what))
				case !t.loaded:
					notes = append(notes, oneLine(fmt.Sprintf("note: %s not loaded (no %s/%s)", t.name, c.Root, t.dir)))
				}
			}
		}
		if c.Error == "" && !c.Mounted {
			notes = append(notes, oneLine("note: "+c.Root+" is not a configfs mount; read as it is"))
		}
	} else {
		notes = append(notes, "note: the report says nothing of configfs (a daemon older than this command: restart it)")
	}
	if n := len(r.Unreadable); n > 0 {
		v.Counts.Unreadable = n
		var lines []string
		for _, u := range r.Unreadable {
			lines = append(lines, "UNKNOWN: unreadable: "+oneLine(u))
		}
		add(Unknown, fmt.Sprintf("%d %s unreadable: %s", n, plural(n, "object", "objects"), oneLine(r.Unreadable[0])), lines...)
	}

	// The listeners.
	groups := map[string]*group{}
	var order []string
	var lines []problem
	into := func(h Health, label, name, line string) {
		g := groups[label]
		if g == nil {
			g = &group{h: h, label: label}
			groups[label] = g
			order = append(order, label)
		}
		g.names = append(g.names, name)
		lines = append(lines, problem{h: h, lines: []string{h.String() + ": " + line}})
	}
	for _, l := range r.Listeners {
		if l.Missing {
			// What a saved config declares and configfs lacks: awaited
			// (made, once boot completion makes objects) within the boot
			// window, missing after it.
			v.Counts.Missing++
			name, desc := listenerName(l), listenerDesc(l)
			if r.BootWindowUntil != nil && r.At.Before(*r.BootWindowUntil) {
				into(Warning, "declared by a saved config, not in configfs (boot window open)", name, desc+": "+oneLine(l.Reason))
			} else {
				into(Critical, "declared by a saved config, not in configfs", name, desc+": "+oneLine(l.Reason))
			}
			continue
		}
		st := parseState(l.State)
		hl := st.Health(l.Managed, l.Expected)
		if hl == rebind.HealthNone {
			continue
		}
		v.Counts.Managed++
		name, desc := listenerName(l), listenerDesc(l)
		if l.GaveUp {
			v.Counts.GaveUp++
		}
		switch hl {
		case rebind.HealthAlive:
			v.Counts.Alive++
		case rebind.HealthUnknown:
			v.Counts.Unknown++
			into(Unknown, "unknown", name, desc+": state unknown: "+oneLine(l.Reason))
		case rebind.HealthDead, rebind.HealthStranded:
			label := "dead"
			if hl == rebind.HealthDead {
				v.Counts.Dead++
			} else {
				v.Counts.Stranded++
				label = "stranded"
			}
			healing := l.Heal != "" && r.Source == "daemon" // without a daemon nobody heals
			switch {
			case l.GaveUp:
				into(Critical, label+", given up", name, desc+": "+label+", given up: "+oneLine(l.Reason))
			case hl == rebind.HealthStranded && inGrace(l, r):
				into(Warning, "stranded, within the kernel's repair grace", name, desc+": stranded, within the kernel's repair grace: "+oneLine(l.Reason))
			case healing:
				v.Counts.Healing++
				into(Warning, label+", healing", name, desc+": "+label+", healing ("+l.Heal+"): "+oneLine(l.Reason))
			case hl == rebind.HealthStranded:
				into(Critical, "stranded past the repair grace", name, desc+": stranded past the repair grace: "+oneLine(l.Reason))
			default:
				into(Critical, "dead", name, desc+": dead: "+oneLine(l.Reason))
			}
		}
	}
	for _, m := range r.SavedMissing {
		if strings.HasPrefix(m.Object, "ports/") && !strings.Contains(strings.TrimPrefix(m.Object, "ports/"), "/") {
			continue // a port: its listener line above says it is missing
		}
		v.Counts.Missing++
		if r.BootWindowUntil != nil && r.At.Before(*r.BootWindowUntil) {
			into(Warning, "declared by a saved config, not in configfs (boot window open)", m.Object, m.Object+": "+oneLine(m.Waiting))
		} else {
			into(Critical, "declared by a saved config, not in configfs", m.Object, m.Object+": "+oneLine(m.Waiting))
		}
	}
	if r.ListenersError != "" {
		if v.Counts.Unknown > 0 {
			g := groups["unknown"]
			g.label = "unknown (RDMA netlink unavailable: " + oneLine(r.ListenersError) + ")"
		} else {
			notes = append(notes, "note: RDMA netlink unavailable ("+oneLine(r.ListenersError)+"); no managed listener needs it")
		}
	}
	if r.AddressesError != "" {
		if v.Counts.Managed > 0 {
			what := "netdev addresses unreadable, no heal can run: " + oneLine(r.AddressesError)
			add(Warning, what, "WARNING: "+what)
		} else {
			notes = append(notes, "note: netdev addresses unreadable: "+oneLine(r.AddressesError))
		}
	}
	if r.SavedConfigsError != "" {
		errs := strings.Split(r.SavedConfigsError, "\n")
		var lines []string
		for _, e := range errs {
			lines = append(lines, "WARNING: saved config: "+oneLine(e))
		}
		add(Warning, fmt.Sprintf("saved config: %d %s refused, not completed: %s", len(errs), plural(len(errs), "entry or file", "entries or files"), oneLine(errs[0])), lines...)
	}
	if c := r.Config; c != nil && c.ReloadRefused != "" {
		what := "reload refused, the daemon runs on its previous config: " + oneLine(c.ReloadRefused)
		add(Warning, what, "WARNING: "+what+" (fix it, nvmet-rebind config check, then reload)")
	}
	if c := r.Config; c != nil && c.SavedUnreadable != "" && r.SavedConfigsError == "" {
		// The engine's own error, when it has one, says it above.
		what := "saved config unreadable, not completed: " + oneLine(c.SavedUnreadable)
		add(Warning, what, "WARNING: "+what)
	}
	if n := len(r.JournalErrors); n > 0 {
		what := fmt.Sprintf("%d intent journal %s unreadable or ignored (a heal may be left half done)", n, plural(n, "entry", "entries"))
		var lines []string
		for _, e := range r.JournalErrors {
			lines = append(lines, "WARNING: journal: "+oneLine(e))
		}
		add(Warning, what, lines...)
	}

	// The verdict: the worst of everything; the status line says the worst.
	v.Health = OK
	for _, p := range global {
		v.Health = worse(v.Health, p.h)
	}
	for _, label := range order {
		v.Health = worse(v.Health, groups[label].h)
	}
	var summary []string
	for _, p := range global {
		if p.h == v.Health {
			summary = append(summary, p.what)
		}
	}
	for _, label := range order {
		if g := groups[label]; g.h == v.Health {
			if strings.HasPrefix(label, "declared") {
				summary = append(summary, fmt.Sprintf("%d %s %s: %s", len(g.names), plural(len(g.names), "object", "objects"), g.label, names(g.names)))
				continue
			}
			summary = append(summary, fmt.Sprintf("%d of %d %s %s: %s", len(g.names), v.Counts.Managed,
				plural(v.Counts.Managed, "listener", "listeners"), g.label, names(g.names)))
		}
	}
	switch {
	case len(summary) > 0:
		v.Summary = strings.Join(summary, "; ")
	case v.Counts.Managed == 0:
		v.Summary = "0 managed listeners"
	default:
		v.Summary = fmt.Sprintf("%d of %d %s alive", v.Counts.Alive, v.Counts.Managed, plural(v.Counts.Managed, "listener", "listeners"))
	}
	// Details: worst first, then the notes, in the order found.
	for _, h := range []Health{Critical, Unknown, Warning} {
		for _, p := range append(global[:len(global):len(global)], lines...) {
			if p.h == h {
				v.Details = append(v.Details, p.lines...)
			}
		}
	}
	v.Details = append(v.Details, notes...)
	v.Details = append(v.Details, "source: "+oneLine(r.Source))
	v.SavedComplete = v.Health == OK && r.BootWindowUntil != nil && r.SavedConfigsError == "" && v.Counts.Missing == 0 &&
		(r.Config == nil || r.Config.SavedUnreadable == "")
	return v
}

// inGrace reports a stranded listener still within the kernel's own repair
// grace (rebind.StrandedGrace from when it was first seen down).
func inGrace(l ListenerStatus, r StatusReport) bool {
	return l.DeadSince != nil && !r.At.IsZero() && r.At.Sub(*l.DeadSince) < rebind.StrandedGrace
}

// listenerName names a listener on the status line: kind, id and, when the
// id does not say it, the address.
func listenerName(l ListenerStatus) string {
	n := l.Kind + " " + quoteName(l.ID)
	if a := hostPort(l); a != "" && !strings.HasSuffix(l.ID, a) {
		n += " " + a
	}
	return oneLine(n)
}

// listenerDesc names a listener in the details, as check always did.
func listenerDesc(l ListenerStatus) string {
	d := l.Kind + " " + quoteName(l.ID)
	if a := hostPort(l); a != "" {
		d += " (" + a + ")"
	}
	return oneLine(d)
}

func hostPort(l ListenerStatus) string {
	if l.Service == "" {
		return l.Address
	}
	return net.JoinHostPort(l.Address, l.Service)
}

// names lists the first three names, and how many more there are.
func names(ns []string) string {
	if len(ns) <= 3 {
		return strings.Join(ns, ", ")
	}
	return strings.Join(ns[:3], ", ") + ", and " + strconv.Itoa(len(ns)-3) + " more"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// oneLine makes text safe for a plugin's output: control characters
// escaped (escape) and no '|', which starts the perf data.
func oneLine(s string) string {
	return strings.ReplaceAll(escape(s), "|", "¦")
}
