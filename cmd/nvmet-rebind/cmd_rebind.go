package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/control"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/daemon"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
	"github.com/urfave/cli/v2"
)

func cmdRebind(c *cli.Context) error {
	k, err := status.KeyOf(c.Args().First())
	if err != nil || c.NArg() != 1 {
		if err == nil {
			err = errors.New("give one port id or portal id (see `nvmet-rebind status`)")
		}
		return exit(2, fmt.Errorf("rebind: %w", err))
	}
	var ls status.ListenerStatus
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	defer cancel()
	err = control.Call(ctx, paths(c).Socket(), control.Request{Cmd: "rebind", ID: k.ID}, &ls)
	if errors.Is(err, control.ErrNoDaemon) {
		ls, err = rebindDirect(ctx, c, k)
	}
	if err != nil {
		return exit(2, rights(err))
	}
	fmt.Fprintf(c.App.Writer, "%s %s: listening=%s: %s\n", ls.Kind, ls.ID, status.YesNo(ls.Listening), ls.Reason)
	if ls.Listening == nil || !*ls.Listening {
		return exit(1, nil)
	}
	return nil
}

// rebindDirect is rebind without a daemon: the id is resolved against what
// configfs holds, read-only, before the lock is taken or anything written;
// then k's endpoint alone is planned and healed under the lock.
func rebindDirect(ctx context.Context, c *cli.Context, k rebind.Key) (status.ListenerStatus, error) {
	if err := resolveKey(c, k); err != nil {
		return status.ListenerStatus{}, err
	}
	env, done, err := direct(c, daemon.Write)
	if err != nil {
		return status.ListenerStatus{}, err
	}
	defer done()
	items, err := env.Engine.ReconcileKey(ctx, k)
	if err != nil {
		return status.ListenerStatus{}, exit(2, err)
	}
	return status.Find(items, env.Engine.Snapshot(), k)
}

// resolveKey checks, writing nothing, that configfs holds k.
func resolveKey(c *cli.Context, k rebind.Key) error {
	env, done, err := direct(c, daemon.ReadOnly)
	if err != nil {
		return err
	}
	defer done()
	snap, err := env.Engine.Look()
	if err != nil {
		return exit(2, err)
	}
	if err := rebind.Resolve(snap.Items, k); err != nil {
		return exit(2, err)
	}
	return nil
}
