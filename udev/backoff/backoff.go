// Package backoff is the one exponential backoff of nvmet-rebind: the
// engine's retries of refused binds and the event sources' reconnects both
// double from a minimum to a maximum.
package backoff

import "time"

// Next returns the delay after cur: min when cur is 0, else twice cur,
// capped at max.
func Next(cur, min, max time.Duration) time.Duration {
	if cur <= 0 {
		return min
	}
	return minDur(2*cur, max)
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// Backoff keeps the current delay between calls.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the next delay and remembers it.
func (b *Backoff) Next() time.Duration {
	b.cur = Next(b.cur, b.Min, b.Max)
	return b.cur
}

// Reset starts again from Min.
func (b *Backoff) Reset() { b.cur = 0 }
