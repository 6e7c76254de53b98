package rebind

import (
	"fmt"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// Op is one kind of step.
type Op int

// Steps a heal is made of.
const (
	OpJournalPut    Op = iota // write Step.Intent to the journal (synced once the listener is back: apply's durable)
	OpUnlink                  // remove port Key's link Step.Link
	OpLink                    // link Step.Link into port Key
	OpSetISER                 // write Step.On to portal Key's iser
	OpJournalDelete           // forget Key's journal entry
)

// Check is the kind of a step's precondition: what apply verifies right
// before the write (configfs may have changed since the plan). It is data,
// so what `plan` describes and what apply checks are the same value.
type Check int

// Checks.
const (
	CheckNone Check = iota
	// CheckLinksAre: the port's links are exactly Pre.Links; else the
	// heal stops before its first write (the admin changed the port: the
	// next round plans again). A port gone skips the object.
	CheckLinksAre
	// CheckISER: the portal exists and iser reads Pre.ISER; a portal gone
	// skips the object, and so does iser=0 where 1 was planned (the
	// admin's). iser already at the value written is done.
	CheckISER
	// CheckLinkPresent: the link exists (absent: done).
	CheckLinkPresent
	// CheckLinkable: the port and subsystem exist and the link does not.
	// The kernel checks it in the write itself: EEXIST is done, ENOENT is
	// the admin's removal.
	CheckLinkable
)

// Pre is a step's precondition.
type Pre struct {
	Check Check
	Links []configfs.Link // CheckLinksAre
	ISER  bool            // CheckISER: the value iser must read
}

func (p Pre) String() string {
	switch p.Check {
	case CheckLinksAre:
		return fmt.Sprintf("the port's links are still the %d planned, else stop", len(p.Links))
	case CheckISER:
		return fmt.Sprintf("the portal exists and iser reads %d", b2i(p.ISER))
	case CheckLinkPresent:
		return "the link exists"
	case CheckLinkable:
		return "the port and subsystem exist and the link does not"
	}
	return ""
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Step is one write of a heal, with its precondition. When a precondition
// does not hold, the step and every later step of the same object (but its
// journal delete) are skipped, or, for CheckLinksAre, the heal stops there.
type Step struct {
	Op     Op
	Key    Key
	Link   configfs.Link // OpUnlink, OpLink
	On     bool          // OpSetISER
	Intent *Intent       // OpJournalPut (a pointer: a port's heal has thousands of other steps)
	Pre    Pre
}

// Heal is the plan for one endpoint: the ordered steps apply executes.
type Heal struct {
	Endpoint Endpoint
	Action   Action
	Reason   string
	Keys     []Key // the objects written
	Steps    []Step
}

// Describe renders a step for `plan`: the write, with the configfs paths
// under root, and its precondition.
func (s Step) Describe(root string) string {
	w := ""
	switch s.Op {
	case OpJournalPut:
		w = "journal " + s.Key.String()
	case OpUnlink:
		w = "rm " + configfs.LinkPath(root, s.Key.ID, s.Link.Name)
	case OpLink:
		w = "ln -s " + configfs.SubsystemPath(root, s.Link.NQN) + " " + configfs.LinkPath(root, s.Key.ID, s.Link.Name)
	case OpSetISER:
		w = fmt.Sprintf("echo %d > %s", b2i(s.On), configfs.ISERPath(root, s.Key.ID))
	case OpJournalDelete:
		w = "forget the journal entry of " + s.Key.String()
	}
	if pre := s.Pre.String(); pre != "" {
		w += "    (if " + pre + ")"
	}
	return w
}

// The steps, each with its precondition.

func journalPort(in Intent, present []configfs.Link) Step {
	return Step{Op: OpJournalPut, Key: Key{KindNvmet, in.ID}, Intent: &in, Pre: Pre{Check: CheckLinksAre, Links: present}}
}

func journalPortal(in Intent) Step {
	return Step{Op: OpJournalPut, Key: Key{KindLIO, in.ID}, Intent: &in, Pre: Pre{Check: CheckISER, ISER: true}}
}

func unlink(k Key, l configfs.Link) Step {
	return Step{Op: OpUnlink, Key: k, Link: l, Pre: Pre{Check: CheckLinkPresent}}
}

func link(k Key, l configfs.Link) Step {
	return Step{Op: OpLink, Key: k, Link: l, Pre: Pre{Check: CheckLinkable}}
}

func setISER(k Key, on bool) Step {
	return Step{Op: OpSetISER, Key: k, On: on, Pre: Pre{Check: CheckISER, ISER: !on}}
}

func forget(k Key) Step { return Step{Op: OpJournalDelete, Key: k} }

// stepKeys lists the objects the steps write, in order of first write.
func stepKeys(steps []Step) []Key {
	var keys []Key
	seen := map[Key]bool{}
	for _, s := range steps {
		if !seen[s.Key] {
			seen[s.Key] = true
			keys = append(keys, s.Key)
		}
	}
	return keys
}
