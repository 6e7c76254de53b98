package rebind

import (
	"errors"
	"fmt"
	"time"
)

// verify turns the heals written this round into outcomes from the
// verdicts of the observation made after them (obs; obsErr when it could
// not be made): ok when the endpoint listens where its address is carried,
// or when the plan of obs expects no listener there (the admin removed or
// emptied its objects meanwhile). It is pure: the verdicts were judged
// when obs was read, and what is expected is the plan's (expected).
func verify(done []pending, obs *Observed, obsErr error, mem Memory, cfg Config, now time.Time) []Outcome {
	out := make([]Outcome, 0, len(done))
	var declared map[Key]*Declared
	if obsErr == nil {
		declared = declaredNow(obs)
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
		case !known, v.State == StateListening, !expected(obs, mem, cfg, declared, h.Endpoint):
			// Listening, or removed (or emptied) by the admin meanwhile:
			// nothing to verify.
			o.Latency = now.Sub(p.wall)
		case v.State == StateUnknown:
			o.Err, o.Result = errors.New("verify: listener state unknown"), ResultUnverified
		case v.State == StateStranded:
			o.Err, o.Result = errors.New("written, but the listener is still on a device that does not carry the address"), ResultUnverified
		case h.Endpoint.Kind == KindTCP:
			// nvmet-tcp's listener is a TCP socket: judged from the
			// kernel's sockets in LISTEN, not the cm_id table.
			o.Err, o.Result = errors.New("written, but no TCP socket in LISTEN"), ResultUnverified
		default:
			o.Err, o.Result = errors.New("written, but no listener in the cm_id table"), ResultUnverified
		}
		out = append(out, o)
	}
	return out
}
