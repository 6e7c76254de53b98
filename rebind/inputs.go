package rebind

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// input is one thing an observation reads besides the configfs trees,
// declared once: how it is read, when two readings are the same, what a
// change of it can change, and what Sight says of it. Carrying an
// observation (carry.go), selecting the endpoints to decide (select.go),
// the round's Sight and the differential test's inputs all go through
// the list; adding an input is one entry here (and its field in
// Observed).
type input struct {
	name string
	// read fills the input's fields of o.
	read func(e *Engine, cfg Config, o *Observed)
	// same tells whether o and b read the same of it.
	same func(o, b *Observed) bool
	// verdictsOnly: a change of it (with the same errors) changes only
	// the endpoints' verdicts, so an observation over unchanged configfs
	// judges them again over the baseline's objects (carry.go) and select
	// finds the verdicts that moved.
	verdictsOnly bool
	// everyEndpoint: a change of it can change the plan of any endpoint,
	// so the round decides them all. Otherwise what it changes shows in
	// the endpoints' verdicts (select compares them) or in the objects it
	// names (the journal).
	everyEndpoint func(o, b *Observed) bool
	// sight fills what the round's Sight says of it.
	sight func(o *Observed, s *Sight)
}

// inputs are the observation's inputs, in the order they are read: the
// kernel's tables first (which listeners are alive decides how much of
// configfs is read), configfs's root last, just before the trees.
var inputs = []input{
	{
		name: "rdma: devices, addresses, cm_id listeners",
		read: func(e *Engine, _ Config, o *Observed) {
			if r, ok := e.opt.Kernel.(TableReader); ok {
				t := r.Read(o.prev)
				o.Devices, o.DevicesErr, o.Addrs, o.AddrsErr = t.Devices, t.DevicesErr, t.Addrs, t.AddrsErr
			} else {
				o.Devices, o.DevicesErr = e.opt.Kernel.Devices()
				o.Addrs, o.AddrsErr = e.opt.Kernel.Addrs()
			}
			o.Listeners, o.ListenersErr = nil, o.DevicesErr
			if o.DevicesErr == nil {
				o.Listeners, o.ListenersErr = e.opt.Kernel.CMIDs(o.Devices)
			}
			o.unknown = unknownReason(o.ListenersErr)
		},
		same: func(o, b *Observed) bool {
			return sameErr(o.DevicesErr, b.DevicesErr) && sameErr(o.AddrsErr, b.AddrsErr) && sameErr(o.ListenersErr, b.ListenersErr) &&
				slices.EqualFunc(o.Devices, b.Devices, rdma.Device.Equal) && slices.EqualFunc(o.Addrs, b.Addrs, rdma.Addr.Equal) &&
				rdma.SameListeners(o.Listeners, b.Listeners)
		},
		verdictsOnly: true,
		everyEndpoint: func(o, b *Observed) bool {
			return !sameErr(o.DevicesErr, b.DevicesErr) || !sameErr(o.AddrsErr, b.AddrsErr) || !sameErr(o.ListenersErr, b.ListenersErr)
		},
		sight: func(o *Observed, s *Sight) { s.Netlink, s.Addrs = o.ListenersErr, o.AddrsErr },
	},
	{
		name: "tcp: sockets in LISTEN",
		read: func(e *Engine, _ Config, o *Observed) {
			o.TCP, o.TCPErr = nil, errNoTCP
			if t, ok := e.opt.Kernel.(TCPKernel); ok {
				o.TCP, o.TCPErr = t.TCPListeners()
			}
		},
		same:          func(o, b *Observed) bool { return sameErr(o.TCPErr, b.TCPErr) && slices.Equal(o.TCP, b.TCP) },
		verdictsOnly:  true,
		everyEndpoint: func(o, b *Observed) bool { return !sameErr(o.TCPErr, b.TCPErr) },
		sight:         func(o *Observed, s *Sight) { s.TCP = o.TCPErr },
	},
	{
		name: "journal: intents of heals under way",
		read: func(e *Engine, _ Config, o *Observed) {
			o.JournalErrs = slices.Clone(e.opt.Quarantined)
			if e.opt.Store != nil {
				var bad []error
				o.Journal, bad = e.opt.Store.Load()
				o.JournalErrs = append(o.JournalErrs, bad...)
			}
		},
		same: func(o, b *Observed) bool {
			return slices.EqualFunc(o.JournalErrs, b.JournalErrs, sameErr) && maps.EqualFunc(o.Journal, b.Journal, Intent.equal)
		},
		everyEndpoint: func(o, b *Observed) bool { return false }, // select decides the objects it names
		sight: func(o *Observed, s *Sight) {
			for k := range o.Journal {
				if k.Kind == KindNvmet {
					s.NvmetWanted = true
				} else {
					s.LIOWanted = true
				}
			}
		},
	},
	{
		name: "saved configs: what nvmetcli's and targetcli's files declare",
		// Read by the loop at its first round and at each reload (the
		// admin's edit is taken when the admin says so); an observation
		// before any round (a command without a daemon) reads them itself.
		read: func(e *Engine, cfg Config, o *Observed) {
			s := e.saved.Load()
			if s == nil {
				s = e.readSaved(cfg)
			}
			o.Declared, o.SavedErr = s.declared, s.err
		},
		same: func(o, b *Observed) bool {
			return slices.EqualFunc(o.Declared, b.Declared, Declared.equal) && errText(o.SavedErr) == errText(b.SavedErr)
		},
		everyEndpoint: func(o, b *Observed) bool { return !slices.EqualFunc(o.Declared, b.Declared, Declared.equal) },
		sight: func(o *Observed, s *Sight) {
			s.Saved = o.SavedErr
			if s.NvmetWanted || s.LIOWanted {
				s.BootUntil = o.BootUntil
			}
		},
	},
	{
		name: "configfs root: mounted, nvmet and LIO loaded",
		read: func(e *Engine, _ Config, o *Observed) {
			if e.opt.Probe != nil {
				o.Configfs = e.opt.Probe()
			}
		},
		same:          func(o, b *Observed) bool { return o.Configfs.same(b.Configfs) },
		everyEndpoint: func(o, b *Observed) bool { return false }, // seen by the trees' reads
		sight:         func(o *Observed, s *Sight) { s.Configfs = o.Configfs },
	},
}

// readInputs reads every input into o, in order, timing each (the
// round's debug line says where its observation went).
func (e *Engine) readInputs(cfg Config, o *Observed) {
	o.readTook = make([]time.Duration, len(inputs))
	for i, in := range inputs {
		t := time.Now()
		in.read(e, cfg, o)
		o.readTook[i] = time.Since(t)
	}
}

// readTimes is an observation's readTook, logged as "rdma=12ms tcp=1ms
// journal=30µs saved_configs=0s configfs_root=0s": formatted only when
// the line is written (slog.LogValuer).
type readTimes []time.Duration

func (took readTimes) LogValue() slog.Value {
	var b strings.Builder
	for i, d := range took {
		if i > 0 {
			b.WriteByte(' ')
		}
		name, _, _ := strings.Cut(inputs[i].name, ":")
		fmt.Fprintf(&b, "%s=%s", strings.ReplaceAll(name, " ", "_"), d.Round(10*time.Microsecond))
	}
	return slog.StringValue(b.String())
}

// errText is err's text ("" for nil): errors compared by what they say.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
