package rebind

import (
	"errors"
	"fmt"
	"time"
)

// verify turns the heals written this round into outcomes from the
// verdicts of the observation made after them (obs; obsErr when it could
// not be made): ok when the endpoint listens where its address is carried.
// It is pure: the verdicts were judged when obs was read.
func verify(done []pending, obs *Observed, obsErr error, now time.Time) []Outcome {
	out := make([]Outcome, 0, len(done))
	var expected map[Endpoint]bool
	if obsErr == nil {
		expected = expects(obs, done)
	}
	for _, p := range done {
		h := p.heal
		o := Outcome{Endpoint: h.Endpoint, Action: h.Action, Keys: h.Keys, At: p.start, Err: p.err, Result: ResultOK}
		var v Verdict
		var known bool
		if obsErr == nil {
			var e *endpointEntry
			if e, known = obs.lookup(h.Endpoint.key()); known {
				v = e.v
			}
		}
		switch {
		case p.err != nil && refused(p.err):
			o.Result = ResultRefused
		case p.err != nil:
			o.Result = ResultError
		case obsErr != nil:
			o.Err, o.Result = fmt.Errorf("verify: %w", obsErr), ResultUnverified
		case !known, v.State == StateListening, !expected[h.Endpoint]:
			// Listening, or removed (or emptied) by the admin meanwhile:
			// nothing to verify.
			o.Latency = now.Sub(p.wall)
		case v.State == StateUnknown:
			o.Err, o.Result = errors.New("verify: listener state unknown"), ResultUnverified
		case v.State == StateStranded:
			o.Err, o.Result = errors.New("written, but the listener is still on a device that does not carry the address"), ResultUnverified
		default:
			o.Err, o.Result = errors.New("written, but no listener in the cm_id table"), ResultUnverified
		}
		out = append(out, o)
	}
	return out
}

// expects reports, for the endpoints of done, whether some object still
// holds a listener there: a port with links (or alive, its links unread),
// a portal with iser=1, or one the journal or a saved config (while its
// window is open) names.
func expects(obs *Observed, done []pending) map[Endpoint]bool {
	eps := make(map[Endpoint]bool, len(done))
	for _, p := range done {
		eps[p.heal.Endpoint] = false
	}
	named := func(k Key) bool {
		if _, ok := obs.Journal[k]; ok {
			return true
		}
		if obs.windowOpen() {
			for _, d := range obs.Declared {
				if d.Kind == k.Kind && d.ID == k.ID {
					return true
				}
			}
		}
		return false
	}
	for i, port := range obs.Ports {
		ep, ok := obs.portEndpoint(i)
		if _, want := eps[ep]; !ok || !want || port.Err != nil {
			continue
		}
		if len(port.Links) > 0 || obs.LinksUnread[port.ID] || named(Key{KindNvmet, port.ID}) {
			eps[ep] = true
		}
	}
	for _, portal := range obs.Portals {
		ep := Endpoint{KindLIO, portal.Addr}
		if _, want := eps[ep]; !want || portal.Err != nil {
			continue
		}
		if portal.ISER || named(Key{KindLIO, portal.ID()}) {
			eps[ep] = true
		}
	}
	return eps
}
