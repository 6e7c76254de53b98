package main

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		env, done, derr := direct(c, daemon.Write)
		if derr != nil {
			return derr
		}
		defer done()
		env.Engine.Retry(k)
		items, rerr := env.Engine.Reconcile(ctx)
		if rerr != nil {
			return exit(2, rerr)
		}
		ls, err = status.Find(items, env.Engine.Snapshot(), k)
	}
	if err != nil {
		return exit(2, err)
	}
	fmt.Fprintf(c.App.Writer, "%s %s: listening=%s: %s\n", ls.Kind, ls.ID, status.YesNo(ls.Listening), ls.Reason)
	if ls.Listening == nil || !*ls.Listening {
		return exit(1, nil)
	}
	return nil
}
