package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/rdma/rdmatest"
)

// The transitions: a warning (or info) when a condition starts, an info
// line when it ends, nothing while it lasts or while all is fine.
func TestSightTransitions(t *testing.T) {
	const root = "/sys/kernel/config"
	both := rebind.ConfigfsSight{Probed: true, Root: root, Mounted: true, Nvmet: true, LIO: true}
	with := func(mod func(*rebind.Sight)) rebind.Sight {
		s := rebind.Sight{Configfs: both}
		mod(&s)
		return s
	}
	missing := with(func(s *rebind.Sight) {
		s.Configfs = rebind.ConfigfsSight{Probed: true, Root: root, Err: errors.New("configfs root /sys/kernel/config does not exist")}
	})
	noNvmet := with(func(s *rebind.Sight) { s.Configfs.Nvmet = false })
	noNvmetWanted := with(func(s *rebind.Sight) { s.Configfs.Nvmet, s.NvmetWanted = false, true })
	noLIO := with(func(s *rebind.Sight) { s.Configfs.LIO = false })
	none := with(func(s *rebind.Sight) { s.Configfs.Nvmet, s.Configfs.LIO = false, false })
	netlink := with(func(s *rebind.Sight) {
		s.Netlink, s.RDMAWanted = errors.New("rdma netlink: protocol not supported"), true
	})
	tcpOnly := with(func(s *rebind.Sight) {
		s.Netlink, s.TCPWanted = errors.New("rdma netlink: protocol not supported"), true
	})
	tcpBlind := with(func(s *rebind.Sight) { s.TCP, s.TCPWanted = errors.New("sock_diag: EPERM"), true })
	addrs := with(func(s *rebind.Sight) { s.Addrs = errors.New("rtnetlink: EPERM") })
	fine := with(func(*rebind.Sight) {})
	saved1 := with(func(s *rebind.Sight) {
		s.Saved = errors.New("nvmetcli config /etc/nvmet/config.json: ports[0]: portid \"x\"")
	})
	saved2 := with(func(s *rebind.Sight) {
		s.Saved = errors.New("nvmetcli config /etc/nvmet/config.json: ports[3]: port 4: subsystem \"..\"")
	})

	type line struct {
		level slog.Level
		msg   string // its start
	}
	W, I := slog.LevelWarn, slog.LevelInfo
	tests := []struct {
		name   string
		rounds []rebind.Sight
		want   [][]line // per round
	}{
		{name: "all fine: nothing, ever", rounds: []rebind.Sight{fine, fine, fine}, want: [][]line{nil, nil, nil}},
		{name: "nothing probed (tests, before the first round): nothing", rounds: []rebind.Sight{{}, {}}, want: [][]line{nil, nil}},
		{
			name:   "configfs missing: warned once, info when mounted",
			rounds: []rebind.Sight{missing, missing, missing, fine, fine},
			want:   [][]line{{{W, "configfs not visible"}}, nil, nil, {{I, "configfs mounted at /sys/kernel/config"}}, nil},
		},
		{
			name:   "configfs goes away and comes back",
			rounds: []rebind.Sight{fine, missing, fine},
			want:   [][]line{nil, {{W, "configfs not visible"}}, {{I, "configfs mounted at"}}},
		},
		{
			name:   "LIO not loaded on an nvmet-only host: info once, not a warning",
			rounds: []rebind.Sight{noLIO, noLIO},
			want:   [][]line{{{I, "LIO iSCSI not loaded"}}, nil},
		},
		{
			name:   "nvmet not loaded although a saved config names nvmet objects: a warning",
			rounds: []rebind.Sight{noNvmetWanted, noNvmetWanted, fine},
			want:   [][]line{{{W, "nvmet not loaded"}}, nil, {{I, "nvmet loaded"}}},
		},
		{
			name:   "nvmet not loaded, LIO is, nothing names nvmet: info",
			rounds: []rebind.Sight{noNvmet, fine},
			want:   [][]line{{{I, "nvmet not loaded"}}, {{I, "nvmet loaded"}}},
		},
		{
			name:   "neither tree: two warnings, once",
			rounds: []rebind.Sight{none, none},
			want:   [][]line{{{W, "nvmet not loaded"}, {W, "LIO iSCSI not loaded"}}, nil},
		},
		{
			name:   "configfs missing hides the trees: no nvmet or LIO lines on top",
			rounds: []rebind.Sight{missing, none},
			want:   [][]line{{{W, "configfs not visible"}}, {{I, "configfs mounted at"}, {W, "nvmet not loaded"}, {W, "LIO iSCSI not loaded"}}},
		},
		{
			name:   "a tree lost while configfs was away is warned when it is back",
			rounds: []rebind.Sight{fine, missing, noNvmetWanted},
			want:   [][]line{nil, {{W, "configfs not visible"}}, {{I, "configfs mounted at"}, {W, "nvmet not loaded"}}},
		},
		{
			name:   "RDMA netlink unavailable: warned once, info when back",
			rounds: []rebind.Sight{netlink, netlink, fine},
			want:   [][]line{{{W, "RDMA netlink unavailable"}}, nil, {{I, "RDMA netlink available again"}}},
		},
		{
			name:   "no RDMA netlink on a host with no RDMA object (TCP only): said once at info",
			rounds: []rebind.Sight{tcpOnly, tcpOnly, fine},
			want:   [][]line{{{I, "RDMA netlink unavailable"}}, nil, {{I, "RDMA netlink available again"}}},
		},
		{
			name:   "TCP listeners unreadable with TCP ports: warned once, info when back",
			rounds: []rebind.Sight{tcpBlind, tcpBlind, fine},
			want:   [][]line{{{W, "TCP listeners unreadable"}}, nil, {{I, "TCP listeners readable again"}}},
		},
		{
			name:   "a saved config refused in part: warned once per change, info when read whole",
			rounds: []rebind.Sight{saved1, saved1, saved2, saved2, fine, fine},
			want:   [][]line{{{W, "saved config refused"}}, nil, {{W, "saved config refused"}}, nil, {{I, "saved configs read whole again"}}, nil},
		},
		{
			name:   "addresses unreadable: warned once, info when back",
			rounds: []rebind.Sight{addrs, addrs, fine},
			want:   [][]line{{{W, "netdev addresses unreadable"}}, nil, {{I, "netdev addresses readable again"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s sightState
			for i, sg := range tt.rounds {
				var got []line
				for _, l := range s.update(sg) {
					got = append(got, line{l.level, l.msg})
				}
				if len(got) != len(tt.want[i]) {
					t.Fatalf("round %d: got %v, want %v", i, got, tt.want[i])
				}
				for j := range got {
					if got[j].level != tt.want[i][j].level || !strings.HasPrefix(got[j].msg, tt.want[i][j].msg) {
						t.Errorf("round %d line %d: got %v, want %v", i, j, got[j], tt.want[i][j])
					}
				}
			}
		})
	}
}

// The daemon's sight over a real directory as the configfs root: one
// without nvmet/ (and not a configfs mount, holding LIO's tree) says
// "nvmet not loaded" once however many rounds run, and "nvmet loaded"
// once it appears; a root that goes away is warned once.
func TestSightOverATempRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "target", "iscsi"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := rebind.DefaultConfig()
	cfg.NvmetConfig = "/etc/nvmet/config.json" // the admin uses nvmet: its absence is a warning
	eng := rebind.New(rebind.Options{Tree: configfs.New(root), Kernel: rdmatest.New(), Config: cfg, Logger: log,
		Probe: func() rebind.ConfigfsSight { return rebind.ProbeConfigfs(root) }})
	w := &sightLogger{eng: eng, log: log}
	ctx := context.Background()
	count := func(s string) int { return strings.Count(logs.String(), s) }
	round := func() {
		t.Helper()
		if _, err := eng.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		w.look(ctx)
		w.look(ctx) // a beat with no new round
	}
	for range 3 {
		round()
	}
	if n := count(`level=WARN msg="nvmet not loaded: ` + filepath.Join(root, "nvmet") + ` missing`); n != 1 {
		t.Errorf("%d nvmet warnings after 3 rounds, want 1:\n%s", n, logs.String())
	}
	if n := count("LIO iSCSI not loaded"); n != 0 {
		t.Errorf("LIO is loaded, yet:\n%s", logs.String())
	}
	if n := count("configfs not visible"); n != 0 {
		t.Errorf("a root holding a tree is visible, yet:\n%s", logs.String())
	}
	if sg := eng.Snapshot().Sight.Configfs; !sg.Probed || sg.Nvmet || !sg.LIO || sg.Err != nil {
		t.Errorf("sight %+v", sg)
	}

	if err := os.Mkdir(filepath.Join(root, "nvmet"), 0o755); err != nil {
		t.Fatal(err)
	}
	round()
	round()
	if n := count(`level=INFO msg="nvmet loaded"`); n != 1 {
		t.Errorf("%d 'nvmet loaded' lines, want 1:\n%s", n, logs.String())
	}

	// The root goes away: one warning, whatever the rounds.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	round()
	round()
	if n := count(`level=WARN msg="configfs not visible`); n != 1 {
		t.Errorf("%d configfs warnings, want 1:\n%s", n, logs.String())
	}
	if n := count("nvmet not loaded"); n != 1 {
		t.Errorf("the vanished root also said nvmet is not loaded:\n%s", logs.String())
	}
	if diff := cmp.Diff(0, count("level=ERROR")); diff != "" {
		t.Errorf("errors logged (-want +got):\n%s\n%s", diff, logs.String())
	}
}

// The task looks after each poke of the reconciler's beats.
func TestSightLoggerRun(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	missing := filepath.Join(t.TempDir(), "config")
	eng := rebind.New(rebind.Options{Tree: configfs.New(missing), Kernel: rdmatest.New(), Config: rebind.DefaultConfig(), Logger: log,
		Probe: func() rebind.ConfigfsSight { return rebind.ProbeConfigfs(missing) }})
	rounds := newTrigger()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&sightLogger{eng: eng, log: log, rounds: rounds}).Run(ctx) }()
	for range 3 {
		if _, err := eng.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		rounds.poke()
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "configfs not visible") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning after a round over a missing root:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if n := strings.Count(logs.String(), "configfs not visible"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "does not exist") {
		t.Errorf("the warning does not say the root is missing:\n%s", logs.String())
	}
}
