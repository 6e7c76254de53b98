package vm

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

func TestParseConsole(t *testing.T) {
	log := strings.Join([]string{
		"[    1.0] some kernel line",
		"E2E INIT",
		"E2E INFO kernel=6.1.0-57-amd64",
		"E2E BEGIN one",
		"  [12.3] one: $ veth veth0 veth1",
		"E2E METRIC one heal_ms=123.4",
		"[   13.0] nvmet: interleaved E2E RESULT one PASS healed in 123 ms\r",
		"E2E BEGIN two",
		"oops",
		"E2E RESULT two FAIL listener survived",
		"E2E METRIC two wall_ms=50",
		"E2E BEGIN three",
		"E2E WARN three the daemon wrote during the outage",
		"E2E RESULT three SKIP siw.ko not available: x",
		"E2E DONE rc=1",
	}, "\n")
	ev := ParseConsole([]byte(log))
	if !ev.Done || ev.RC != 1 || !ev.Init {
		t.Fatalf("done=%v rc=%d", ev.Done, ev.RC)
	}
	want := map[string]Result{
		"one":   {"one", "PASS", "healed in 123 ms"},
		"two":   {"two", "FAIL", "listener survived"},
		"three": {"three", "SKIP", "siw.ko not available: x"},
	}
	for k, w := range want {
		if ev.Results[k] != w {
			t.Errorf("%s: got %+v want %+v", k, ev.Results[k], w)
		}
	}
	if strings.Join(ev.Order, ",") != "one,two,three" {
		t.Errorf("order %v", ev.Order)
	}
	if m := ev.Metrics["one"]; len(m) != 1 || m[0] != (Metric{"heal_ms", "123.4"}) {
		t.Errorf("metrics %v", m)
	}
	if l := ev.Logs["two"]; len(l) != 2 || l[0] != "oops" {
		t.Errorf("logs of two: %q", l)
	}
	if w := ev.Warns["three"]; len(w) != 1 || w[0] != "the daemon wrote during the outage" {
		t.Errorf("warns %v", ev.Warns)
	}
	if len(ev.Info) != 1 {
		t.Errorf("info %v", ev.Info)
	}
	if ev := ParseConsole([]byte("no markers")); ev.Done || ev.RC != -1 || ev.Init {
		t.Errorf("empty console: %+v", ev)
	}
}

func TestArchiveNewc(t *testing.T) {
	a := NewArchive()
	a.Bytes("/e2e/lib.sh", []byte("echo hi\n"), 0o755)
	a.Symlink("/bin/sh", "dash")
	a.CharDev("/dev/console", 5, 1, 0o600)
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if !bytes.HasPrefix(b, []byte("070701")) || !bytes.Contains(b, []byte("TRAILER!!!")) {
		t.Fatalf("not a newc archive")
	}
	if len(b)%4 != 0 {
		t.Errorf("length %d not 4-aligned", len(b))
	}
	// Parents come before children.
	if i, j := bytes.Index(b, []byte("e2e\x00")), bytes.Index(b, []byte("e2e/lib.sh\x00")); i < 0 || j < i {
		t.Errorf("directory e2e at %d, file at %d", i, j)
	}
	cpio, err := exec.LookPath("cpio")
	if err != nil {
		t.Skip("cpio not installed: structure checked only")
	}
	cmd := exec.Command(cpio, "-t", "--quiet")
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -t: %v", err)
	}
	got := strings.Fields(string(out))
	for _, w := range []string{"bin", "bin/sh", "dev", "dev/console", "e2e", "e2e/lib.sh"} {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			t.Errorf("cpio -t lacks %s: %v", w, got)
		}
	}
}
