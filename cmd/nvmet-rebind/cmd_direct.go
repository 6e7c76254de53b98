package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/daemon"
	"github.com/urfave/cli/v2"
)

// The commands that act without the daemon or poke it: trigger (the udev
// hook), reload, and direct, the engine they build when no daemon answers.

// direct builds an engine without a daemon: read-only for observers; for
// writers under the state-dir lock (released by the returned func).
func direct(c *cli.Context, mode daemon.Mode) (*daemon.Env, func(), error) {
	log, err := newLogger(c)
	if err != nil {
		return nil, nil, err
	}
	unlock := func() {}
	if mode == daemon.Write {
		if unlock, err = daemon.Lock(paths(c).State); err != nil {
			return nil, nil, exit(2, rights(err))
		}
	}
	env, err := daemon.Open(paths(c), log, mode, faultHook())
	if err != nil {
		unlock()
		return nil, nil, exit(2, rights(err))
	}
	return env, func() { env.Close(); unlock() }, nil
}

// cmdTrigger is the udev RUN hook: it pokes the running daemon, or without
// one reconciles under the daemon's lock (Engine.Settle). Exit 0: poked, or
// reconciled; 1: nothing done (another nvmet-rebind holds the lock, the
// daemon refused the poke, not root); 2: a usage or configuration error,
// or the reconcile failed. udev logs a RUN program's failure, so every
// non-zero exit says why on stderr.
func cmdTrigger(c *cli.Context) error {
	sock, state := paths(c).Socket(), c.String("state-dir")
	poke := func() error {
		ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
		defer cancel()
		return control.Call(ctx, sock, control.Request{Cmd: "trigger"}, nil)
	}
	err := poke()
	if err == nil {
		return nil
	}
	if !errors.Is(err, control.ErrNoDaemon) && !errors.Is(err, control.ErrRefused) {
		return exit(1, fmt.Errorf("trigger: did nothing: the daemon on %s did not take the poke: %w", sock, err))
	}
	// No daemon. Run by udev on a systemd host: the reconcile is systemd's
	// to run, in nvmet-rebind-trigger@.service under the daemon's sandbox,
	// not here in udevd's (its IPAddressDeny= would hold every NVMe/TCP or
	// siw listener this reconcile makes, and udev(7) keeps long work out of
	// RUN). One instance per event (SEQNUM), so that a burst reconciles
	// after its last event.
	if seq := os.Getenv("SEQNUM"); seq != "" && systemdBooted() {
		err := startTriggerUnit(c.Context, seq)
		if err == nil {
			return nil
		}
		fmt.Fprintf(c.App.ErrWriter, "trigger: %v; reconciling here instead\n", err)
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	// No daemon answers. A held lock is a daemon starting (its socket
	// comes next, then its first reconcile), or another trigger or rebind
	// reconciling (udev runs one trigger per event, often several at
	// once): wait a little for either.
	// Under udev the wait is short (udev kills slow RUN programs);
	// elsewhere (the trigger unit, a shell) the held lock of a burst's
	// reconcile is waited for, so that this event is reconciled after it.
	wait := triggerLockWait
	if os.Getenv("SEQNUM") == "" {
		wait = triggerUnitLockWait
	}
	errPoked := errors.New("poked")
	unlock, lerr := daemon.AwaitLock(c.Context, state, wait, func() error {
		if poke() == nil {
			return errPoked
		}
		return nil
	})
	switch {
	case lerr == nil:
	case errors.Is(lerr, errPoked):
		return nil
	case errors.Is(lerr, fs.ErrPermission):
		return exit(1, fmt.Errorf("trigger: did nothing: not root (uid %d): no access to the control socket %s nor to the lock in %s: %w", os.Geteuid(), sock, state, lerr))
	case errors.Is(lerr, syscall.EWOULDBLOCK):
		return exit(1, fmt.Errorf("trigger: did nothing: no daemon answers on %s and the lock of %s is held by another nvmet-rebind (a daemon starting or stuck, or a trigger or rebind reconciling) for over %v", sock, state, wait))
	default:
		return exit(2, fmt.Errorf("trigger: did nothing: %w", lerr))
	}
	defer unlock()
	env, err := daemon.Open(paths(c), log, daemon.Write, faultHook())
	if err != nil {
		return exit(2, fmt.Errorf("trigger: did nothing: %w", err))
	}
	defer env.Close()
	// Rounds follow the plan's next look for triggerSettle (graces of
	// 5 s, GID-table rechecks, backoff); the last may take the rest.
	ctx, cancel := context.WithTimeout(c.Context, triggerSettle+20*time.Second)
	defer cancel()
	if _, err := env.Engine.Settle(ctx, time.Now().Add(triggerSettle)); err != nil {
		return exit(2, fmt.Errorf("trigger: reconcile: %w", err))
	}
	return nil
}

// triggerLockWait bounds how long trigger waits for a held lock under
// udev; triggerUnitLockWait elsewhere;
// triggerSettle how long a trigger without a daemon follows its plan's
// next look (Engine.Settle): past the kernel's 5 s repair grace of a
// stranded listener and a device's 5 s removal grace.
const (
	triggerLockWait     = 2 * time.Second
	triggerUnitLockWait = 30 * time.Second
	triggerSettle       = 15 * time.Second
)

// triggerUnit is the template the udev hook starts on a systemd host.
const triggerUnit = "nvmet-rebind-trigger@"

// systemdBooted reports whether systemd is PID 1 (sd_booted(3)).
func systemdBooted() bool {
	st, err := os.Lstat("/run/systemd/system")
	return err == nil && st.IsDir()
}

// startTriggerUnit asks systemd to start the trigger unit's instance for
// udev event seq, without waiting for it (udev kills slow RUN programs).
func startTriggerUnit(ctx context.Context, seq string) error {
	if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
		return fmt.Errorf("SEQNUM %q is not udev's event number", seq)
	}
	systemctl, err := exec.LookPath("systemctl")
	if err != nil {
		systemctl = "/usr/bin/systemctl" // udev's RUN may have no PATH
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	unit := triggerUnit + seq + ".service"
	if out, err := exec.CommandContext(ctx, systemctl, "--no-block", "start", unit).CombinedOutput(); err != nil {
		return fmt.Errorf("systemctl --no-block start %s: %w: %s", unit, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func cmdReload(c *cli.Context) error {
	// A running daemon validates the config itself (daemon.Validate, as
	// config check: the TOML, the roots, the [boot] files) and refuses a
	// bad one; check, the metrics and its status line say so until a good
	// reload: one judge of the config in use. It is told which file this
	// command means, and refuses to reload its own when that is another.
	p := paths(c)
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	var reply daemon.ReloadReply
	err := control.Call(ctx, p.Socket(), control.Request{Cmd: "reload", ID: p.Config}, &reply)
	if err == nil {
		if reply.Summary == "" { // a daemon older than this command
			reply.Summary = "config " + p.Config + " is valid"
		}
		fmt.Fprintf(c.App.Writer, "%s; the daemon reloaded it\n", reply.Summary)
		return nil
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		return exit(2, rights(fmt.Errorf("reload refused: %w", err)))
	}
	v, verr := daemon.Validate(p)
	if verr != nil {
		return exit(2, rights(fmt.Errorf("reload refused: %w; no daemon answers on %s, nothing reloaded", verr, p.Socket())))
	}
	// No answer on the socket. Never signal a pid: after a crash it may
	// belong to another process. The lock tells whether a daemon is there.
	unlock, lerr := daemon.Lock(p.State)
	if lerr != nil {
		return exit(2, fmt.Errorf("%s, but the daemon holding %s does not answer on %s (%v); use systemctl reload nvmet-rebind", v.Summary(), p.State, p.Socket(), err))
	}
	unlock()
	fmt.Fprintf(c.App.Writer, "%s; no daemon is running, nothing to reload\n", v.Summary())
	return nil
}
