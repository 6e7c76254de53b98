package complete

// The record (completion.json): this boot's window, what was seen, what
// is being made.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// record is completion.json.
type record struct {
	Version int    `json:"version"`
	Boot    string `json:"boot_id"`
	// Until is when this boot's window closes: set by the first start of
	// the boot, so that a restart or a one-shot trigger later in the same
	// boot never opens another.
	Until  time.Time `json:"window_until"`
	Seen   []string  `json:"seen"`
	Making []string  `json:"making,omitempty"`
}

// loadRecord reads the record once; one of another boot is forgotten, and
// this boot's window starts now.
func (c *Completer) loadRecord(in rebind.CompletionInput) error {
	if c.loaded {
		return nil
	}
	c.loaded = true
	c.seen, c.making = map[string]bool{}, map[string]bool{}
	c.retry, c.backoff, c.differs = map[string]time.Time{}, map[string]time.Duration{}, map[string]string{}
	if c.BootID != nil {
		c.boot, _ = c.BootID()
	}
	c.until = in.Now.Add(in.Config.BootWindow)
	if c.Store == nil {
		return nil
	}
	fresh := func() error {
		if in.DryRun {
			return nil
		}
		return c.saveRecord()
	}
	b, err := c.Store.Completion()
	if err != nil {
		return err
	}
	if b == nil {
		return fresh()
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return errors.Join(fmt.Errorf("completion record: %w; starting a new one (objects seen before are not known)", err), fresh())
	}
	if r.Boot != c.boot {
		return fresh() // another boot: its restore made everything again
	}
	if !r.Until.IsZero() {
		c.until = r.Until
	}
	for _, id := range r.Seen {
		c.seen[id] = true
	}
	for _, id := range r.Making {
		c.making[id] = true
	}
	return nil
}

// saveRecord writes the record durably.
func (c *Completer) saveRecord() error {
	if c.Store == nil {
		return nil
	}
	r := record{Version: 1, Boot: c.boot, Until: c.until, Seen: slices.Sorted(maps.Keys(c.seen)), Making: slices.Sorted(maps.Keys(c.making))}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return c.Store.SaveCompletion(b)
}
