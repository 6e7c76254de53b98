package rebind

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// Kind says which target code owns a listener. It is one byte (an
// Endpoint and a Key are in every status item, decision and journal
// entry) and reads and writes as its name in JSON.
type Kind uint8

// The kinds of listener the engine heals (the zero Kind is none). A Key
// (a configfs object) is KindNvmet or KindLIO; an Endpoint (a kernel
// listener) is KindNvmet for an nvmet RDMA port's, KindTCP for an nvmet
// TCP port's (a kernel TCP socket, not an rdma_cm listener), KindLIO for
// an iSER portal's.
const (
	KindNvmet Kind = iota + 1
	KindLIO
	KindTCP
)

var kindNames = [...]string{"", "nvmet", "lio", "nvmet-tcp"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name; any other is an error naming it.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if i > 0 && n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("unknown kind %q", b)
}

// owner is the RES_KERN_NAME of the kind's listeners.
func (k Kind) owner() string {
	switch k {
	case KindLIO:
		return "ib_isert"
	case KindTCP:
		return "nvmet_tcp"
	}
	return "nvmet_rdma"
}

// ports tells an endpoint kind whose objects are nvmet ports.
func (k Kind) ports() bool { return k == KindNvmet || k == KindTCP }

// Key identifies a configfs object: an nvmet port id or a LIO portal id.
type Key struct {
	Kind Kind
	ID   string
}

func (k Key) String() string {
	if k.Kind == KindNvmet {
		return "nvmet port " + k.ID
	}
	return "lio portal " + k.ID
}

func compareKeys(a, b Key) int {
	if c := strings.Compare(a.Kind.String(), b.Kind.String()); c != 0 {
		return c
	}
	if a.Kind == KindNvmet {
		return configfs.ComparePortIDs(a.ID, b.ID)
	}
	return strings.Compare(a.ID, b.ID)
}

func keysString(ks []Key) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}

// Endpoint is one kernel listener: what rdma_cm binds, what a device
// removal destroys and what must be re-created.
type Endpoint struct {
	Kind Kind
	Addr netip.AddrPort
}

// Owner is the kernel module that owns the listener (RES_KERN_NAME).
func (e Endpoint) Owner() string { return e.Kind.owner() }

func (e Endpoint) String() string { return e.Owner() + " " + e.Addr.String() }

// epKey is an Endpoint as the engine's maps key it: plain memory, no
// string and no pointer, so it hashes and compares as bytes.
type epKey struct {
	ip   [16]byte
	port uint16
	is4  bool
	kind Kind
}

func (e Endpoint) key() epKey {
	a := e.Addr.Addr()
	return epKey{ip: a.As16(), port: e.Addr.Port(), is4: a.Is4(), kind: e.Kind}
}

// compareEndpoints orders nvmet endpoints (RDMA, then TCP) before LIO
// ones (configfs order of the objects), then by address.
func compareEndpoints(a, b Endpoint) int {
	if a.Kind != b.Kind {
		return kindRank(a.Kind) - kindRank(b.Kind)
	}
	return a.Addr.Compare(b.Addr)
}

func kindRank(k Kind) int {
	switch k {
	case KindNvmet:
		return 0
	case KindTCP:
		return 1
	}
	return 2
}

// State is what the kernel says of an endpoint's listener: the one fact
// from which listening yes/no, the metric's state and check's verdict are
// derived (Listening, Item.Health).
type State uint8

// States.
const (
	StateNone      State = iota // nothing is expected to listen (or the object has no listener to judge)
	StateListening              // LISTEN on the RDMA device that carries the address
	StateDead                   // no LISTEN entry
	StateStranded               // LISTEN on a device that no longer carries the address
	StateUnknown                // the cm_id table could not be read
)

var stateNames = [...]string{"", "listening", "dead", "stranded", "unknown"}

func (s State) String() string { return stateNames[s] }

// ParseState reads a state as String renders it (`status --json`'s
// "state"); a name it does not know is StateUnknown.
func ParseState(name string) State {
	for i, n := range stateNames {
		if n == name {
			return State(i)
		}
	}
	return StateUnknown
}

// Listening says whether the listener is up where its address is carried:
// nil when unknown or when there is nothing to judge (StateNone).
func (s State) Listening() *bool {
	switch s {
	case StateListening:
		return ptr(true)
	case StateDead, StateStranded:
		return ptr(false)
	}
	return nil
}

// down reports a listener that should be healed: dead or stranded.
func (s State) down() bool { return s == StateDead || s == StateStranded }

// Action names what a heal does, for logs, status and metrics.
type Action uint8

// Actions.
const (
	ActNone Action = iota
	// ActRebindPort: journal the links, unlink every subsystem, relink
	// them in order (the port's listener is dead or stranded).
	ActRebindPort
	// ActCompletePort: link what the journal says is missing (a refused
	// relink, or a crash mid-rebind).
	ActCompletePort
	// ActToggleISER: journal every sharer, iser 0 on each, then 1 on each.
	ActToggleISER
	// ActCompleteISER: iser 1 on journaled sharers that read 0.
	ActCompleteISER
	// ActDropJournal: the journal entries have nothing left to do.
	ActDropJournal
	// ActCompleteBoot: link subsystems (or set iser) that a saved config
	// declares and the boot-time restore could not.
	ActCompleteBoot
)

func (a Action) String() string {
	return [...]string{"none", "rebind", "complete-relink", "toggle-iser", "complete-iser", "drop-journal", "complete-boot"}[a]
}

// heals reports an action that re-creates a listener (not a journal drop).
func (a Action) heals() bool { return a != ActNone && a != ActDropJournal }

// Result is what applying one heal came to, after verification.
type Result uint8

// Results (the label of nvmet_rebind_rebinds_total).
const (
	ResultNone       Result = iota // a journal drop: nothing to verify
	ResultOK                       // the listener is verified in the cm_id table
	ResultRefused                  // the kernel refused the bind (no address or device yet)
	ResultError                    // a write failed otherwise
	ResultUnverified               // written, but the listener is not (yet) there
)

func (r Result) String() string {
	return [...]string{"", "ok", "refused", "error", "unverified"}[r]
}

// Results lists the results a heal can have, in metric order.
var Results = []Result{ResultOK, ResultRefused, ResultUnverified, ResultError}

// Outcome is what applying one heal came to, after verification: also the
// last result of each object it wrote (status).
type Outcome struct {
	Endpoint Endpoint
	Action   Action
	Keys     []Key
	Result   Result
	Err      error
	At       time.Time
	Latency  time.Duration // from the first write to LISTEN verified
}

// Item is the status of one configfs object (nvmet port or LIO portal).
type Item struct {
	Key
	Endpoint Endpoint // zero when the object has no usable address
	Address  netip.Addr
	Reason   string
	Device   string // RDMA device of the LISTEN entry, else the carrier
	GUID     uint64 // node GUID of the carrier (or of Device)
	Netdev   string // netdev holding the address
	Carrier  string // RDMA device rdma_cm would bind the address to now
	Sharers  int    // configfs objects holding the endpoint
	// DeadSince is when the listener was first seen down (zero: it is not).
	DeadSince time.Time
	// RetryAt is when the engine looks at the object again by itself
	// (backoff, graces, GID-table rechecks); zero: at the next event.
	RetryAt     time.Time
	CarrierPort uint32
	Service     uint16
	// State is the kernel's verdict on the object's listener; for an
	// object not managed (wildcard, outside the watched subnets), on the
	// listener it would have.
	State    State
	Action   Action // the action of the endpoint's heal this round
	Managed  bool
	Expected bool // a listener should exist: links, iser=1, journal
	// GaveUp: dead or stranded for more than give_up_after, so no longer
	// healed until a reload or a manual rebind.
	GaveUp bool
	// Missing: a saved config declares the object and configfs lacks it.
	Missing bool
}

// Listening is State.Listening.
func (it Item) Listening() *bool { return it.State.Listening() }

// Health is what an item counts as, for metrics and check.
type Health int

// Healths.
const (
	HealthNone     Health = iota // not managed, or nothing expected: not counted
	HealthAlive                  // listening
	HealthDead                   // no listener
	HealthStranded               // on a device that no longer carries the address
	HealthUnknown                // cannot tell
)

func (h Health) String() string {
	return [...]string{"", "alive", "dead", "stranded", "unknown"}[h]
}

// Health is the item's health: State.Health.
func (it Item) Health() Health { return it.State.Health(it.Managed, it.Expected) }

// Health derives what an object in this state counts as: the one function
// metrics, status and check read.
func (s State) Health(managed, expected bool) Health {
	if !managed || !expected {
		return HealthNone
	}
	switch s {
	case StateListening:
		return HealthAlive
	case StateDead:
		return HealthDead
	case StateStranded:
		return HealthStranded
	}
	return HealthUnknown
}

// ServiceString renders the service as configfs spells it.
func (it Item) ServiceString() string {
	if it.Service == 0 && !it.Address.IsValid() {
		return ""
	}
	return strconv.Itoa(int(it.Service))
}

func ptr[T any](v T) *T { return &v }
