package rebind

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma"
)

// Grace periods and rechecks.
const (
	// removalGrace bounds the wait for a device whose listener vanished
	// to finish unregistering.
	removalGrace = 5 * time.Second
	// strandedGrace is how long the kernel's own repair (nvmet-rdma's
	// repair_work on ADDR_CHANGE: at once, then every 5 s) gets before a
	// stranded listener is rebound.
	strandedGrace = 5 * time.Second
)

// recheckAfter are the delays after a device or address event at which an
// endpoint that waits for its address to appear in a GID table is looked at
// again: the table fills a moment after the device or address appears, and
// no event says when.
var recheckAfter = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond}

// watched reports whether ip is in the watched subnets (all, when none).
func watched(cfg Config, ip netip.Addr) bool {
	if len(cfg.Watch) == 0 {
		return true
	}
	for _, p := range cfg.Watch {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// hold is why gate holds a heal back: rendered in Reason, and when to
// look again (zero: at the next event or resync).
type hold struct {
	why    string
	until  time.Time
	gaveUp bool // the give-up timer ran out (Item.GaveUp, a metric)
	// clockFree: only a change of the inputs ends it, never the clock
	// (the address on no netdev, pin_device, given up).
	clockFree bool
}

// gate applies the conditions of a heal, in order, the first that holds
// winning: the address is on a netdev; for RDMA, an RDMA device carries it
// (a GID table entry) and a stranded listener is not pinned to its device;
// a manual rebind lifts the rest; the give-up timer; for RDMA, the
// removal and repair graces and the device pin; backoff. A TCP bind needs
// only the address: no device, GID table, removal, repair or pinning.
// keys are the endpoint's objects in configfs order. It returns nil when
// the heal may run now.
func gate(ep Endpoint, keys []Key, v Verdict, obs *Observed, mem Memory, cfg Config) *hold {
	now, c, rdmaEP := obs.Now, v.Carrier, ep.Kind != KindTCP
	switch {
	case obs.AddrsErr != nil:
		return &hold{why: fmt.Sprintf("waiting: addresses unknown (%v)", obs.AddrsErr), clockFree: true}
	case !c.Held:
		return &hold{why: fmt.Sprintf("waiting for %s to appear on a netdev", ep.Addr.Addr()), clockFree: true}
	case rdmaEP && !c.HasDev:
		return &hold{why: fmt.Sprintf("waiting for an RDMA device to carry %s on %s (no GID table entry yet)", ep.Addr.Addr(), c.Netdev), until: recheck(obs.EventAt, now)}
	case rdmaEP && v.State == StateStranded && cfg.PinDevice:
		return &hold{why: fmt.Sprintf("pin_device = true: left on %s", v.EntryName), clockFree: true}
	}
	for _, k := range keys {
		if mem.Forced[k] {
			return nil
		}
	}
	since := deadSince(mem, ep, v.State, now)
	if v.State.down() && giveUp(cfg, since, now) {
		what := "dead"
		if !rdmaEP {
			what = "not listening"
		}
		return &hold{why: fmt.Sprintf("gave up: %s for more than give_up_after=%v (run `nvmet-rebind rebind %s` or reload to try again)", what, cfg.GiveUpAfter, keys[0].ID), gaveUp: true, clockFree: true}
	}
	if rdmaEP {
		if until, wait := removalWait(mem, ep, v, since, now); wait {
			return &hold{why: fmt.Sprintf("waiting: %s (index %d) that it listened on is still registered, its removal is probably in progress", c.Dev, c.Index), until: until}
		}
		if until := since.Add(strandedGrace); v.State == StateStranded && now.Before(until) {
			return &hold{why: fmt.Sprintf("waiting until %s for the kernel's own repair", until.Format(time.TimeOnly+".000")), until: until}
		}
		for _, k := range keys {
			if pin, ok := mem.Pins[k]; cfg.PinDevice && ok && pin != c.GUID {
				return &hold{why: fmt.Sprintf("pinned: was on node GUID %s, %s is now on %s (GUID %s)", rdma.FormatGUID(pin), ep.Addr.Addr(), c.Dev, rdma.FormatGUID(c.GUID))}
			}
		}
	}
	if t, ok := mem.NextTry[ep]; ok && now.Before(t) {
		return &hold{why: fmt.Sprintf("retry in %v", t.Sub(now).Round(time.Millisecond)), until: t}
	}
	return nil
}

// giveUp is the give-up timer: dead since since for give_up_after or more.
func giveUp(cfg Config, since, now time.Time) bool {
	return cfg.GiveUpAfter > 0 && now.Sub(since) >= cfg.GiveUpAfter
}

// removalWait is the removal grace: a dead listener whose address is still
// carried by the very device (same index) it was last alive on waits,
// from when it was first seen dead, for that device's removal to finish.
func removalWait(mem Memory, ep Endpoint, v Verdict, since, now time.Time) (time.Time, bool) {
	if v.State != StateDead {
		return time.Time{}, false
	}
	if idx, ok := mem.AliveOn[ep]; !ok || idx != v.Carrier.Index+1 {
		return time.Time{}, false
	}
	until := since.Add(removalGrace)
	return until, now.Before(until)
}

// recheck returns the next look after the last event, or zero when the
// short re-checks are over (the periodic resync looks again).
func recheck(eventAt, now time.Time) time.Time {
	if eventAt.IsZero() {
		return time.Time{}
	}
	for _, d := range recheckAfter {
		if t := eventAt.Add(d); t.After(now) {
			return t
		}
	}
	return time.Time{}
}

// settleLook is when to look again at an RDMA listener taken as alive
// only because no GID table has an entry for its address on the netdev
// that holds it (judge): an address moved or added under it. The entry
// comes a moment after the address event and no event says when; if it
// comes on another device than the listener's, the listener is stranded.
// Zero when there is nothing to settle, or the re-checks are over.
func settleLook(ep Endpoint, v Verdict, obs *Observed) time.Time {
	if c := v.Carrier; ep.Kind == KindTCP || v.State != StateListening || !c.Held || c.HasDev && c.FromGID {
		return time.Time{}
	}
	return recheck(obs.EventAt, obs.Now)
}

// nextLook is the one place the next round's time is decided, from the
// round's last plan: now when a heal is due that the round did not run
// (its backoff ran out, or its device came back, while the round acted on
// others), else the earliest time an item waits for (backoff, graces,
// GID-table rechecks); zero: at the next event or resync. A dry run never
// runs heals, so they never make it come back sooner.
func nextLook(pl Planned, ran map[Endpoint]bool, now time.Time, dryRun bool) time.Time {
	if !dryRun {
		for _, h := range pl.Heals {
			if h.Action.heals() && !ran[h.Endpoint] {
				return now
			}
		}
	}
	return pl.wake.next()
}
