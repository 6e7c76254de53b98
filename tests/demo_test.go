package tests

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDemo boots the Debian 6.1 kernel and tells, in plain words and with
// timings, how a device reset kills an nvmet port and a LIO iSER portal and
// how nvmet-rebind brings them back. It runs only when asked for:
// `make demo`, tests/demo.sh, `go test ./tests -run Demo -v`, or
// NVMET_REBIND_DEMO=1. NVMET_REBIND_DEMO_KERNEL picks another kernel.
func TestDemo(t *testing.T) {
	if !demoRequested() {
		t.Skip("the demo runs only when asked for: make demo, tests/demo.sh or go test ./tests -run Demo -v")
	}
	skipUnlessVM(t)
	series := os.Getenv("NVMET_REBIND_DEMO_KERNEL")
	if series == "" {
		series = "6.1"
	}
	out := os.Stdout
	fmt.Fprintf(out, "Preparing the %s VM (Debian kernel, qemu, TCG; the first run downloads and builds, later runs use the cache)…\n", series)
	img := prepareImage(t, series)
	fmt.Fprintf(out, "Booting %s under qemu (no network device; every address lives inside the guest)…\n", img.kernel.Release)
	start := time.Now()
	booted := false
	res := bootVM(t, img, []string{"e2e.mode=demo"}, 10*time.Minute, func(line string) {
		if i := strings.Index(line, "E2E INFO boot ready"); i >= 0 && !booted {
			booted = true
			fmt.Fprintf(out, "Guest up after %.1f s.\n", time.Since(start).Seconds())
		}
		if i := strings.Index(line, "DEMO"); i >= 0 {
			fmt.Fprintf(out, "[%6.1fs] %s\n", time.Since(start).Seconds(), strings.TrimPrefix(strings.TrimPrefix(line[i:], "DEMO"), " "))
		}
	})
	r, ok := res.Events.Results["demo"]
	if !ok || r.Status != "PASS" {
		p := saveConsole(t, img.kernel.Series+"-demo-console.log", res.Console)
		t.Fatalf("demo failed (%v): %s\nconsole log: %s\n%s", ok, r.Detail, p, tail(res.Console, 40))
	}
	fmt.Fprintf(out, "Demo finished in %.0f s of wall time.\n", res.Elapsed.Seconds())
}

// demoRequested: -run names the demo explicitly, or NVMET_REBIND_DEMO=1.
func demoRequested() bool {
	if os.Getenv("NVMET_REBIND_DEMO") == "1" {
		return true
	}
	if f := flag.Lookup("test.run"); f != nil {
		return strings.Contains(f.Value.String(), "Demo")
	}
	return false
}
