package status_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

const netlinkErr = "open NETLINK_RDMA socket: rdma netlink is not available on this kernel (is ib_core loaded?): protocol not supported"

// busyReport is 50 rows as a large target shows them: nvmet ports over
// RDMA and TCP, LIO portals with real IQNs, IPv6 addresses, reasons of
// several clauses, failed heals with the kernel's words, retries.
func busyReport() status.StatusReport {
	last := time.Date(2026, 1, 1, 10, 11, 12, 0, time.UTC)
	retry := time.Now().Add(time.Hour)
	var ls []status.ListenerStatus
	for i := range 50 {
		l := status.ListenerStatus{Kind: "nvmet", ID: fmt.Sprint(i + 1), Address: fmt.Sprintf("2001:db8:1234:5678:9abc:def0:1234:%x", i),
			Service: "4420", Managed: true, Expected: true, State: "stranded", Transport: "rdma",
			Reason: fmt.Sprintf("stranded: listening on mlx5_%d, but 2001:db8:1234:5678:9abc:def0:1234:%x is carried by mlx5_%d port 1 now; hosts cannot connect; 1 subsystem link(s) to restore from the journal (iSER listener shared by 2 portals)", i, i, i+1)}
		switch i % 5 {
		case 1:
			l.Kind, l.ID, l.Address, l.Service = "lio", fmt.Sprintf("iqn.2003-01.org.linux-iscsi.storage-node-%02d.example.com:sn.0123456789ab/tpgt_1/192.0.2.%d:3260", i, i), fmt.Sprint("192.0.2.", i), "3260"
		case 2:
			l.Transport, l.State, l.Reason = "tcp", "dead", "not listening: 192.0.2.9 is on no netdev (the kernel refuses the link until it is)"
		case 3:
			l.LastAction, l.LastResult, l.LastAt = "complete-relink", "write /sys/kernel/config/nvmet/ports/4/subsystems/nqn.2014-08.org.nvmexpress:uuid:0123: cannot assign requested address", &last
			l.RetryAt = &retry
		case 4:
			l.LastAction, l.LastResult, l.LastAt = "rebind", "ok", &last
		}
		ls = append(ls, l)
	}
	return status.StatusReport{Source: "daemon", Listeners: ls}
}

// The fitted table never passes its width, and says every word of every
// reason and every id whole.
func TestWriteFittedWidth(t *testing.T) {
	for _, width := range []int{status.Width, 100, 80} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			r := busyReport()
			var b bytes.Buffer
			if err := status.WriteFitted(&b, r, width); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for i, line := range strings.Split(out, "\n") {
				if kind, id, ok := strings.Cut(line, "  "); ok && kind == "lio" && len(id) > width-len("lio  ") {
					continue // an id longer than the line, alone on its line: never cut
				}
				if n := utf8.RuneCountInString(line); n > width {
					t.Errorf("line %d is %d columns, over %d:\n%s", i+1, n, width, line)
				}
			}
			words := strings.Fields(out)
			for _, l := range r.Listeners {
				if !strings.Contains(out, l.ID) {
					t.Errorf("id %s is not whole in the table", l.ID)
				}
				for _, w := range strings.Fields(l.Reason) {
					if !strings.Contains(strings.Join(words, " "), w) {
						t.Errorf("%s: reason word %q missing", l.ID, w)
					}
				}
			}
		})
	}
}

// -o wide is the table as it always was: one line per row, every reason
// whole on it.
func TestWriteTableWideOneLinePerRow(t *testing.T) {
	r := busyReport()
	var b bytes.Buffer
	if err := status.WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if got, want := len(lines), 1+len(r.Listeners)+3; got != want { // header, rows, blank, source, ""
		t.Fatalf("%d lines, want %d:\n%s", got, want, b.String())
	}
	for i, l := range r.Listeners {
		if row := lines[1+i]; !strings.Contains(row, l.ID) || !strings.HasSuffix(row, l.Reason) {
			t.Errorf("row %d is not %s with its whole reason:\n%s", i+1, l.ID, row)
		}
	}
}

// TestWriteFittedGolden pins the layout: the shared condition above, a
// short table with its reasons beside, a long id alone on its row's
// first line, a failed heal's error after the reason.
func TestWriteFittedGolden(t *testing.T) {
	last := time.Date(2026, 1, 1, 10, 11, 12, 0, time.Local)
	portal := "iqn.2003-01.org.linux-iscsi.host.example.com:sn.0123456789ab/tpgt_1/192.0.2.5:3260"
	r := status.StatusReport{Source: "direct", ListenersError: netlinkErr, Listeners: []status.ListenerStatus{
		{Kind: "nvmet", ID: "1", Address: "192.0.2.1", Service: "4420", Transport: "tcp", State: "listening", Managed: true, Reason: "listening"},
		{Kind: "nvmet", ID: "2", Address: "192.0.2.2", Service: "4420", Transport: "rdma", State: "unknown", Managed: true,
			Reason: "listener state unknown: " + netlinkErr, LastAction: "rebind", LastResult: "verify: listener state unknown", LastAt: &last},
		{Kind: "lio", ID: portal, Address: "192.0.2.5", Service: "3260", State: "unknown", Managed: true,
			Reason: "listener state unknown: " + netlinkErr + " (iSER listener shared by 2 portals)"},
	}}
	want := "" +
		"listening is unknown (2 of 3 rows): open NETLINK_RDMA socket: rdma netlink is not available on this kernel (is ib_core\n" +
		"  loaded?): protocol not supported\n" +
		"\n" +
		"KIND       ID  ADDRESS         STATE      MANAGED  LAST ACTION                RETRY  REASON\n" +
		"nvmet-tcp  1   192.0.2.1:4420  listening  yes      -                          -      listening\n" +
		"nvmet      2   192.0.2.2:4420  unknown    yes      rebind: failed (10:11:12)  -      listener state unknown; last rebind\n" +
		"                                                                                     failed: verify: listener state\n" +
		"                                                                                     unknown\n" +
		"lio  " + portal + "\n" +
		"               192.0.2.5:3260  unknown    yes      -                          -      listener state unknown (iSER\n" +
		"                                                                                     listener shared by 2 portals)\n" +
		"\n(source: direct)\n"
	var b bytes.Buffer
	if err := status.WriteFitted(&b, r, status.Width); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("WriteFitted() mismatch (-want +got):\n%s", diff)
	}
}

// What every row says is said once, above the table, and no row repeats
// it; on a TCP-only host the cm_id table's error concerns no row.
func TestWriteFittedShared(t *testing.T) {
	tests := []struct {
		name      string
		r         status.StatusReport
		above     []string // the lines before the table
		rowsLack  string   // no row holds it
		rowsHave  []string
		wantCount map[string]int // times in the whole output
	}{
		{
			name: "the netlink error on every row",
			r: status.StatusReport{Source: "direct", ListenersError: netlinkErr, Listeners: []status.ListenerStatus{
				listener("1", unknownNetlink), listener("2", unknownNetlink), listener("3", unknownNetlink),
			}},
			above: []string{
				"listening is unknown (3 of 3 rows): open NETLINK_RDMA socket: rdma netlink is not available on this kernel (is ib_core",
				"  loaded?): protocol not supported",
				"all 3 rows: listener state unknown",
			},
			rowsLack:  "listener state unknown",
			wantCount: map[string]int{"is ib_core": 1, "listener state unknown": 1},
		},
		{
			name: "a TCP-only host",
			r: status.StatusReport{Source: "direct", ListenersError: netlinkErr, Listeners: []status.ListenerStatus{
				listener("1", tcp), listener("2", func(l *status.ListenerStatus) { tcp(l); dead(l) }),
			}},
			above: []string{
				"RDMA listeners cannot be read (no row here needs them): open NETLINK_RDMA socket: rdma netlink is not available on",
				"  this kernel (is ib_core loaded?): protocol not supported",
			},
			rowsHave:  []string{"listening on mlx5_0", "no listener"},
			wantCount: map[string]int{"is ib_core": 1},
		},
		{
			name: "the same reason on every row",
			r: status.StatusReport{Source: "daemon", Listeners: []status.ListenerStatus{
				listener("1", nil), listener("2", nil),
			}},
			above:     []string{"all 2 rows: listening on mlx5_0"},
			rowsLack:  "listening on mlx5_0",
			wantCount: map[string]int{"listening on mlx5_0": 1},
		},
		{
			name: "a clause every row has",
			r: status.StatusReport{Source: "daemon", Listeners: []status.ListenerStatus{
				listener("1", func(l *status.ListenerStatus) {
					l.Reason = "listening; subsystem(s) nqn.x declared in boot.json do not exist"
				}),
				listener("2", func(l *status.ListenerStatus) {
					dead(l)
					l.Reason = "listener dead; subsystem(s) nqn.x declared in boot.json do not exist"
				}),
			}},
			above:     []string{"all 2 rows: subsystem(s) nqn.x declared in boot.json do not exist"},
			rowsHave:  []string{"listening", "listener dead"},
			rowsLack:  "boot.json",
			wantCount: map[string]int{"boot.json": 1},
		},
		{
			name:  "one row says it on its row",
			r:     status.StatusReport{Source: "daemon", Listeners: []status.ListenerStatus{listener("1", nil)}},
			above: nil, rowsHave: []string{"listening on mlx5_0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := status.WriteFitted(&b, tt.r, status.Width); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			head, table, ok := strings.Cut(out, "KIND ")
			if !ok {
				t.Fatalf("no table:\n%s", out)
			}
			var above []string
			if head != "" {
				above = strings.Split(strings.TrimSuffix(head, "\n\n"), "\n")
			}
			if diff := cmp.Diff(tt.above, above); diff != "" {
				t.Errorf("above the table (-want +got):\n%s\n%s", diff, out)
			}
			rows, _, _ := strings.Cut(table, "\n\n")
			if tt.rowsLack != "" && strings.Contains(rows, tt.rowsLack) {
				t.Errorf("the rows repeat %q:\n%s", tt.rowsLack, out)
			}
			for _, h := range tt.rowsHave {
				if !strings.Contains(rows, h) {
					t.Errorf("the rows lack %q:\n%s", h, out)
				}
			}
			for s, n := range tt.wantCount {
				if got := strings.Count(out, s); got != n {
					t.Errorf("%q said %d times, want %d:\n%s", s, got, n, out)
				}
			}
		})
	}
}

func unknownNetlink(l *status.ListenerStatus) {
	unknown(l)
	l.Reason = "listener state unknown: " + netlinkErr
}

func tcp(l *status.ListenerStatus) { l.Transport = "tcp" }

// The fitted table escapes what it reads from the system as the wide
// one does.
func TestWriteFittedEscapes(t *testing.T) {
	r := status.StatusReport{Source: "daemon", Listeners: []status.ListenerStatus{
		{Kind: "nvmet", ID: "1\nnvmet  2  fake", State: "dead", Reason: "line one\nline two\ttab"},
		{Kind: "lio", ID: "iqn.x\x1b[2J/tpgt_1/192.0.2.1:3260", State: "none", Reason: "ok"},
	}}
	var b bytes.Buffer
	if err := status.WriteFitted(&b, r, status.Width); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`"1\nnvmet  2  fake"`, `line one\nline two\ttab`, `"iqn.x\x1b[2J/tpgt_1/192.0.2.1:3260"`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %s:\n%s", want, out)
		}
	}
	if strings.ContainsRune(out, '\x1b') || strings.ContainsRune(out, '\t') || strings.Count(out, "\n") != 5 {
		t.Errorf("raw control characters, or rows broken:\n%q", out)
	}
}

func TestWriteFittedWriteError(t *testing.T) {
	if err := status.WriteFitted(failWriter{}, busyReport(), status.Width); err == nil {
		t.Error("WriteFitted() to a failing writer returned nil, want an error")
	}
}
