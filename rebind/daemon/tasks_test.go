package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
	"github.com/nvmet-rebind/nvmet-rebind/udev"
)

// notifySocket stands in for systemd's NOTIFY_SOCKET; it returns the
// datagrams received.
func notifySocket(t *testing.T) <-chan string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return msgs
}

// The reconciler is ready after its first full reconcile, and only then
// does ready tell systemd READY=1; every beat sends WATCHDOG=1 and pokes
// the tasks that follow the rounds.
func TestReconcilerReady(t *testing.T) {
	msgs := notifySocket(t)
	k := rdmatest.NewTargetPair(t, nqn, iqn)
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng := rebind.New(rebind.Options{Tree: k.FS(), Kernel: k, Store: st, Config: rebind.DefaultConfig(), Logger: log})
	d := &daemon{log: log, env: &Env{Config: rebind.DefaultConfig(), Engine: eng, Store: st}}
	rounds, trims := newTrigger(), newTrigger()
	r := newReconciler(eng, d.notify, rounds, trims)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := quiet(ctx, r.String(), <-done); err != nil {
			t.Errorf("%v stopped: %v", r, err)
		}
	}()

	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	d.ready(rctx, []task{&watcher{name: "uevents"}, r})
	rcancel()
	if n := eng.Snapshot().Stats.Reconciles; n == 0 {
		t.Fatal("ready returned before the first reconcile")
	}
	got := map[string]bool{}
	for !got["READY=1"] || !got["WATCHDOG=1"] {
		select {
		case m := <-msgs:
			got[m] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("no READY=1 and WATCHDOG=1 after the first reconcile; got %v", got)
		}
	}
	for name, c := range map[string]trigger{"the textfile writer": rounds, "the memory policy": trims} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Errorf("%s was not poked after the first round", name)
		}
	}
}

// A daemon that stops before its tasks are ready never says READY=1.
func TestNotReadyBeforeStop(t *testing.T) {
	msgs := notifySocket(t)
	d := &daemon{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.ready(ctx, []task{&reconciler{ready: make(chan struct{})}})
	d.notify("STOPPING=1")
	select {
	case m := <-msgs:
		if m != "STOPPING=1" {
			t.Errorf("%q from a daemon whose reconciler never reconciled, want STOPPING=1 first", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no STOPPING=1")
	}
}

// A kernel without the RDMA netlink monitor: one info line, and the
// watcher ends without stopping the daemon; a required stream's error
// still stops it.
func TestWatcherUnsupported(t *testing.T) {
	t.Parallel()
	unsupported := func(context.Context, func(udev.Hint), udev.Options) error {
		return fmt.Errorf("rdma monitor: %w: no MONITOR_MODE", udev.ErrRDMAMonitorUnsupported)
	}
	var buf bytes.Buffer
	w := &watcher{name: "rdma-monitor", watch: unsupported, log: slog.New(slog.NewTextHandler(&buf, nil))}
	if err := w.Run(context.Background()); err != nil {
		t.Errorf("optional watcher on a kernel without it: %v, want nil", err)
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=INFO") || !strings.Contains(out, "RDMA netlink monitor not available") {
		t.Errorf("log %q: want one info line", out)
	}
	required := &watcher{name: "uevents", watch: unsupported}
	if err := required.Run(context.Background()); !errors.Is(err, udev.ErrRDMAMonitorUnsupported) {
		t.Errorf("required watcher: %v, want the error", err)
	}
}
