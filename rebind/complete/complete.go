// Package complete makes what nvmetcli's saved config declares and
// configfs lacks, within the boot window: the objects a restore that stops
// at its first refusal never created (nvmetcli's does: LANDSCAPE.md).
//
// The file is flattened into units in nvmetcli restore's order (hosts;
// subsystems with their namespaces, namespaces' enable, allowed hosts and
// attributes; ports with their attributes, ANA groups and referrals). A
// unit is one object, or one step of an object the restore makes in two
// (a namespace's enable; a subsystem's attributes, written after its
// namespaces). Each round, every unit not yet settled is looked at:
//
//   - present and not being made: seen. From then on its absence is the
//     admin's removal, never undone (kept in the record across restarts,
//     for this boot).
//   - absent and never seen: due, once the units it depends on are there
//     (its parent; an allowed host's host) and, for an enable, once its
//     device path resolves. Due units are made in order.
//
// Crash safety: the units about to be made are written to the record
// (making, fsync'd) before the first write, and the record is written
// again once they are made. A unit still in making at the next start is
// finished whatever configfs shows (a directory made but its attributes
// not written is not "seen": it is ours to finish), each write skipped
// when the attribute already reads the value.
//
// Links of ports to subsystems are not units: the engine makes them as
// endpoints (they wait for an address and an RDMA device).
package complete

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/saved"
)

// Store keeps the record durably (rebind/state: completion.json).
type Store interface {
	Completion() ([]byte, error)
	SaveCompletion([]byte) error
}

// Completer implements rebind.Completer over configfs. Its methods run in
// the engine's loop, one at a time.
type Completer struct {
	Ops   configfs.Ops
	Root  string // the configfs root
	Store Store  // nil: nothing kept across restarts
	// BootID names this boot (/proc/sys/kernel/random/boot_id): a record
	// of another boot is forgotten (the restore made everything again).
	BootID func() (string, error)
	// Load reads the saved config (saved.LoadTree).
	Load func(rebind.Config) (*saved.Tree, error)
	// Stat resolves a device path (os.Stat when nil).
	Stat func(string) (fs.FileInfo, error)
	Log  *slog.Logger

	tree    *saved.Tree
	treeErr error
	// units are the tree flattened (at each load, not each round), byID
	// the same by id (a dependency's lookup).
	units   []unit
	byID    map[string]unit
	loaded  bool // the record was read
	boot    string
	until   time.Time
	seen    map[string]bool
	making  map[string]bool
	retry   map[string]time.Time // a refused unit is not tried again before
	backoff map[string]time.Duration
	differs map[string]string
}

// path is the unit's object in configfs ("" for a storage object not
// there).
func (c *Completer) path(u unit) string {
	if u.kind == kSO {
		return c.soDir(u.so.Plugin, u.so.Name)
	}
	return filepath.Join(c.Root, u.dir)
}

func (c *Completer) log() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Log
}

// Complete implements rebind.Completer.
func (c *Completer) Complete(ctx context.Context, in rebind.CompletionInput) rebind.Completion {
	if in.Reload || c.byID == nil { // read at the first call and each reload only
		c.tree, c.treeErr = c.Load(in.Config)
		if c.treeErr != nil {
			c.log().Warn("saved config: entries not completed", "err", c.treeErr)
		}
		c.units, c.byID = nil, map[string]unit{}
		if c.tree != nil {
			c.units = units(c.tree)
			for _, u := range c.units {
				c.byID[u.id] = u
			}
		}
	}
	out := rebind.Completion{Err: c.treeErr}
	if c.tree == nil {
		return out
	}
	out.Source = c.tree.Source
	if c.tree.LIO != nil {
		out.Source = strings.TrimPrefix(out.Source+", "+c.tree.LIO.Source, ", ")
	}
	var errs []error
	if err := c.loadRecord(in); err != nil {
		errs = append(errs, err)
	}
	open := in.Open && in.Now.Before(c.until)
	r := round{c: c, known: map[string]bool{}, due: map[string]bool{}}
	var due []unit
	waiting := false
	for _, u := range c.units {
		if ctx.Err() != nil {
			break
		}
		if c.seen[u.id] && !c.making[u.id] {
			continue // settled: in place, or removed by the admin since
		}
		present, err := r.has(u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if present && !c.making[u.id] {
			c.seen[u.id] = true
			c.noteDiffers(u)
			continue
		}
		if w := r.blocked(u); w != "" {
			if !strings.HasPrefix(w, "-") {
				out.Missing = append(out.Missing, rebind.Pending{Object: u.id, Waiting: w})
			}
			continue
		}
		if !open && !c.making[u.id] {
			out.Missing = append(out.Missing, rebind.Pending{Object: u.id, Waiting: "not made: the boot window closed at " + c.until.Format(time.DateTime)})
			continue
		}
		if u.kind == kEnable || u.kind == kSO {
			if w, again := c.device(u); w != "" {
				out.Missing = append(out.Missing, rebind.Pending{Object: u.id, Waiting: w})
				waiting = waiting || again
				continue
			}
			if d := c.differsFor(u); d != "" {
				c.differs[u.id] = d
				continue // the admin's namespace: never enabled behind them
			}
		}
		if t, ok := c.retry[u.id]; ok && in.Now.Before(t) {
			out.Missing = append(out.Missing, rebind.Pending{Object: u.id, Waiting: "refused; tried again at " + t.Format(time.TimeOnly)})
			waiting = true
			continue
		}
		r.known[u.id], r.due[u.id] = true, true // its dependents follow it in this round
		due = append(due, u)
	}
	if in.DryRun {
		for _, u := range due {
			out.Planned = append(out.Planned, c.describe(u)...)
			out.Missing = append(out.Missing, rebind.Pending{Object: u.id, Waiting: "due"})
		}
		out.Err = errors.Join(append([]error{c.treeErr}, errs...)...)
		return out
	}
	if len(due) > 0 {
		for _, u := range due {
			c.making[u.id] = true
		}
		if err := c.saveRecord(); err != nil {
			// Not durable: make nothing (a crash would leave half-made
			// objects the next start could not tell from the admin's).
			for _, u := range due {
				delete(c.making, u.id)
			}
			errs = append(errs, err)
			due = nil
		}
	}
	made := false
	for _, u := range due {
		err := c.make(u)
		if err != nil && !errors.Is(err, errAttrs) {
			if dev := u.device(); dev != "" && errors.Is(err, syscall.EROFS) {
				err = fmt.Errorf("%w: the kernel opens %s read-write as this process, whose unit mounts it read-only: add its directory to ReadWritePaths= in a drop-in (nvmet-rebind(8))", err, dev)
			}
			c.log().Warn("saved config: object not made", "object", u.id, "source", out.Source, "err", err)
			out.Missing = append(out.Missing, rebind.Pending{Object: u.id, Waiting: "refused: " + err.Error()})
			b := min(max(2*c.backoff[u.id], time.Second), 30*time.Second)
			c.backoff[u.id], c.retry[u.id] = b, in.Now.Add(b)
			delete(c.making, u.id)
			waiting = true
			continue
		}
		if err != nil {
			c.differs[u.id] = err.Error()
			c.log().Warn("saved config: object made, some attributes refused", "object", u.id, "source", out.Source, "err", err)
		} else {
			c.log().Info("saved config: object made", "object", u.id, "source", out.Source)
		}
		delete(c.making, u.id)
		delete(c.retry, u.id)
		delete(c.backoff, u.id)
		c.seen[u.id] = true
		out.Made = append(out.Made, u.id)
		made = true
	}
	if made || len(due) > 0 {
		if err := c.saveRecord(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.differs)) {
		out.Differs = append(out.Differs, id+": "+c.differs[id])
	}
	if waiting {
		out.Again = time.Second
	}
	out.Err = errors.Join(append([]error{c.treeErr}, errs...)...)
	return out
}

// device says what an enable waits for ("" when its device can be
// opened): the path resolving to a block device or a regular file (nvmet's
// file backend). again: worth another look soon (udev may be about to
// make the path).
func (c *Completer) device(u unit) (string, bool) {
	p := u.device()
	if p == "" {
		return "refused: the file declares no device_path", false
	}
	stat := c.Stat
	if stat == nil {
		stat = os.Stat
	}
	st, err := stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "waiting for " + p, true
	}
	if err != nil {
		return "waiting for " + p + ": " + err.Error(), true
	}
	if real, err := filepath.EvalSymlinks(p); err == nil && c.Stat == nil {
		for _, bad := range []string{"/proc/", "/sys/"} {
			if strings.HasPrefix(real+"/", bad) {
				return "refused: " + p + " resolves to " + real + ", not a disk", false
			}
		}
	}
	switch m := st.Mode(); {
	case u.kind == kSO && u.so.Plugin == "block" && m.IsRegular():
		return "refused: " + p + " is a file, not a block device (a block backstore)", false
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0, m.IsRegular():
		return "", false
	case m&fs.ModeCharDevice != 0:
		return "refused: " + p + " is a character device, not a block device or a file", false
	case m&fs.ModeNamedPipe != 0:
		return "refused: " + p + " is a FIFO, not a block device or a file", false
	default:
		return "refused: " + p + " is not a block device or a file", false
	}
}

// differsFor says how a namespace that exists differs from the file where
// enabling it would act on another device than the declared one.
func (c *Completer) differsFor(u unit) string {
	if u.kind != kEnable {
		return ""
	}
	a := c.Ops.ReadAttrs([]string{c.path(u)}, []string{"device_path"})[0]
	if a.Err != nil || a.Errs[0] != nil || c.making[strings.TrimSuffix(u.id, "#enable")] {
		return ""
	}
	if a.Values[0] != u.ns.Device {
		return fmt.Sprintf("device_path is %q, the file says %q: not enabled", a.Values[0], u.ns.Device)
	}
	return ""
}

// noteDiffers records, once when first seen, how an object that was there
// before the completer reads against the file (never changed).
func (c *Completer) noteDiffers(u unit) {
	as := u.attrs
	if len(as) == 0 || u.kind == kAttrs {
		return
	}
	if d := c.diff(c.path(u), as); d != "" {
		c.differs[u.id] = d
	}
}

// diff lists the attributes that read other than as.
func (c *Completer) diff(dir string, as []saved.Attr) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.File
	}
	r := c.Ops.ReadAttrs([]string{dir}, names)[0]
	if r.Err != nil {
		return ""
	}
	var d []string
	for i, a := range as {
		if r.Errs[i] == nil && r.Values[i] != a.Value {
			d = append(d, fmt.Sprintf("%s is %q, the file says %q", a.File, r.Values[i], a.Value))
		}
	}
	return strings.Join(d, "; ")
}

// errAttrs marks a unit made whose attributes were not all written (as
// nvmetcli's restore, which reports those and goes on).
var errAttrs = errors.New("attributes refused")

// write writes the attributes that do not read their value already.
func (c *Completer) write(dir string, as []saved.Attr) error {
	if len(as) == 0 {
		return nil
	}
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.File
	}
	r := c.Ops.ReadAttrs([]string{dir}, names)[0]
	if r.Err != nil {
		return r.Err
	}
	var errs []error
	for i, a := range as {
		if r.Errs[i] == nil && r.Values[i] == a.Value {
			continue
		}
		if err := c.Ops.WriteAttr(filepath.Join(dir, a.File), a.Value); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.File, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errAttrs, errors.Join(errs...))
	}
	return nil
}

// mkdir makes dir; one already there is ours to finish (making).
func (c *Completer) mkdir(dir string) error {
	if err := c.Ops.Mkdir(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// make makes one unit.
func (c *Completer) make(u unit) error {
	dir := c.path(u)
	switch u.kind {
	case kSO:
		return c.makeSO(u.so)
	case kLUN, kMapped:
		return c.makeLink(u)
	case kHost, kNamespace, kANAGroup:
		if err := c.mkdir(dir); err != nil {
			return err
		}
		return c.write(dir, u.attrs)
	case kSubsystem:
		return c.mkdir(dir)
	case kAttrs:
		return c.write(dir, u.attrs)
	case kAllowed:
		err := c.Ops.Symlink(filepath.Join(c.Root, "nvmet/hosts", u.name), dir)
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	case kEnable:
		if err := c.write(dir, []saved.Attr{{File: "enable", Value: "1"}}); err != nil {
			return unwrapAttrs(err)
		}
		if u.ns.ANAGrp != 0 {
			return c.write(dir, []saved.Attr{{File: "ana_grpid", Value: strconv.FormatUint(uint64(u.ns.ANAGrp), 10)}})
		}
		return nil
	case kPort:
		if err := c.mkdir(dir); err != nil {
			return err
		}
		err := c.write(dir, u.port.Attrs)
		for _, g := range u.port.ANAGroups {
			if g.GrpID == 1 {
				err = errors.Join(err, c.write(filepath.Join(dir, "ana_groups/1"), g.Attrs))
			}
		}
		return err
	case kReferral:
		if err := c.mkdir(dir); err != nil {
			return err
		}
		err := c.write(dir, u.ref.Attrs)
		if u.ref.Enable {
			err = errors.Join(err, c.write(dir, []saved.Attr{{File: "enable", Value: "1"}}))
		}
		return err
	}
	return nil
}

// unwrapAttrs turns a refused enable into a plain error: the unit is not
// made (it is tried again), unlike an object whose attributes were refused.
func unwrapAttrs(err error) error {
	if errors.Is(err, errAttrs) {
		return errors.New(strings.TrimPrefix(err.Error(), errAttrs.Error()+": "))
	}
	return err
}

// describe is what make would write, for `plan`.
func (c *Completer) describe(u unit) []string {
	dir := c.path(u)
	var out []string
	echo := func(d string, as []saved.Attr) {
		for _, a := range as {
			out = append(out, fmt.Sprintf("echo %q > %s", a.Value, filepath.Join(d, a.File)))
		}
	}
	switch u.kind {
	case kHost, kNamespace, kANAGroup, kSubsystem, kPort, kReferral, kLUN, kMapped:
		out = append(out, "mkdir "+dir)
	case kSO:
		return c.describeSO(u.so)
	}
	if u.kind == kLUN || u.kind == kMapped {
		return append(out, "ln -s "+c.linkTarget(u)+" "+filepath.Join(dir, c.alias(u)))
	}
	switch u.kind {
	case kAllowed:
		out = append(out, "ln -s "+filepath.Join(c.Root, "nvmet/hosts", u.name)+" "+dir)
	case kEnable:
		echo(dir, []saved.Attr{{File: "enable", Value: "1"}})
		if u.ns.ANAGrp != 0 {
			echo(dir, []saved.Attr{{File: "ana_grpid", Value: strconv.FormatUint(uint64(u.ns.ANAGrp), 10)}})
		}
	case kReferral:
		echo(dir, u.ref.Attrs)
		if u.ref.Enable {
			echo(dir, []saved.Attr{{File: "enable", Value: "1"}})
		}
	case kPort:
		echo(dir, u.port.Attrs)
		for _, g := range u.port.ANAGroups {
			if g.GrpID == 1 {
				echo(filepath.Join(dir, "ana_groups/1"), g.Attrs)
			}
		}
	default:
		echo(dir, u.attrs)
	}
	return out
}
