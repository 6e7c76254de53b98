package main

// Hostile files (a FIFO, a device) where the daemon reads: the config, a
// journal entry, pins.json, a configfs attribute. Every command ends at
// once with an error naming the file, or the daemon reports it and keeps
// running; SIGTERM stops it within a second either way.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runFor runs c, killing it after limit: a command that needs the kill
// has blocked.
func runFor(t *testing.T, c *exec.Cmd, limit time.Duration) (string, int) {
	t.Helper()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(limit):
		c.Process.Kill()
		<-done
		t.Fatalf("%v blocked for %v: %s", c.Args[1:], limit, out.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), 0
}

// mkfifo replaces path with a FIFO.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

// holdWriter keeps a writer on the FIFO at path until the test ends
// (O_RDWR: a FIFO's open for both never waits): a blocking read of it
// would wait forever, a non-blocking one gets EAGAIN.
func holdWriter(t *testing.T, path string) {
	t.Helper()
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
}

// TestHostileConfig: a config that is a FIFO (without and with a writer)
// or /dev/zero (through a symlink, as /etc alternatives make them) ends
// every command at once, with the path, what it is and what to do.
func TestHostileConfig(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		make       func(t *testing.T, cfg string)
	}{
		{"FIFO", "not a regular file (a FIFO): replace it with a regular file", func(t *testing.T, cfg string) { mkfifo(t, cfg) }},
		{"FIFO with a writer", "not a regular file (a FIFO): replace it with a regular file", func(t *testing.T, cfg string) {
			mkfifo(t, cfg)
			holdWriter(t, cfg)
		}},
		{"symlink to /dev/zero", "not a regular file (a character device): replace it with a regular file", func(t *testing.T, cfg string) {
			must(t, os.Remove(cfg))
			must(t, os.Symlink("/dev/zero", cfg))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDaemonEnv(t)
			cfg := d.args[1]
			tt.make(t, cfg)
			want := "config " + cfg + ": " + tt.want
			out, code := runFor(t, d.cmd(nil, "run"), 5*time.Second)
			if code != exitConfig || !strings.Contains(out, want) {
				t.Errorf("run: exit %d: %s\nwant exit %d (an invalid configuration) and %q", code, out, exitConfig, want)
			}
			// The other commands that read the config end too (their
			// exit codes are theirs).
			for _, args := range [][]string{{"plan"}, {"reload"}, {"trigger"}, {"status"}, {"check"}} {
				out, _ := runFor(t, d.cmd(nil, args...), 5*time.Second)
				t.Logf("%s: %s", args[0], strings.TrimSpace(out))
			}
		})
	}
}

// TestHostileFilesDaemonRuns: with a FIFO as a configfs attribute (with a
// writer: EAGAIN), another as an LIO portal's iser, a FIFO journal entry,
// a FIFO pins.json and a /dev/zero symlink as a journal batch, the daemon
// starts, answers status, moves the bad journal files aside and stops
// within a second of SIGTERM.
func TestHostileFilesDaemonRuns(t *testing.T) {
	d := newDaemonEnv(t)
	cfs := d.args[3]
	state := d.args[7]
	traddr := filepath.Join(cfs, "nvmet/ports/1/addr_traddr")
	mkfifo(t, traddr)
	holdWriter(t, traddr)
	np := filepath.Join(cfs, "target/iscsi/iqn.2024-01.lab:t/tpgt_1/np/192.0.2.1:3260")
	must(t, os.MkdirAll(np, 0o755))
	must(t, os.WriteFile(filepath.Join(np, "../../enable"), []byte("1\n"), 0o644))
	mkfifo(t, filepath.Join(np, "iser"))
	entry := filepath.Join(state, "journal", "nvmet-000000000000000000000000.json")
	mkfifo(t, entry)
	holdWriter(t, entry)
	batch := filepath.Join(state, "journal", "batch-00000000000000000001.json")
	must(t, os.Symlink("/dev/zero", batch))
	pins := filepath.Join(state, "pins.json")
	mkfifo(t, pins)
	holdWriter(t, pins)
	must(t, os.Chmod(state, 0o700))
	must(t, os.Chmod(filepath.Join(state, "journal"), 0o700))

	// GORACE: a -race build sleeps 1 s at exit unless told not to.
	c := d.cmd([]string{"GORACE=atexit_sleep_ms=0"}, "--log-level", "debug", "run")
	// A file, not a buffer: read while the daemon runs, without a race.
	logf, err := os.Create(filepath.Join(d.dir, "daemon.log"))
	must(t, err)
	defer logf.Close()
	c.Stdout, c.Stderr = logf, logf
	logText := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}) // closed when c has exited, with waitErr
	var waitErr error
	go func() { waitErr = c.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			c.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(d.dir, "run", "control.sock")); err == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("daemon exited: %v\n%s", waitErr, logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", logText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, _ := runFor(t, d.cmd(nil, "status"), 5*time.Second)
	t.Logf("status:\n%s", out)
	for _, p := range []string{traddr, filepath.Join(np, "iser")} {
		if want := p + ": not a regular file (a FIFO)"; !strings.Contains(out, want) {
			t.Errorf("status does not report %q", want)
		}
	}
	for _, p := range []string{entry, batch} {
		if _, err := os.Lstat(p + ".corrupt"); err != nil {
			t.Errorf("%s not moved aside: %v", p, err)
		}
	}
	time.Sleep(200 * time.Millisecond) // a round or two with the FIFOs in place
	start := time.Now()
	must(t, c.Process.Signal(syscall.SIGTERM))
	select {
	case <-done:
		if waitErr != nil {
			t.Errorf("daemon exit after SIGTERM: %v", waitErr)
		}
		t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Fatalf("daemon still running 1 s after SIGTERM:\n%s", logText())
	}
	l := logText()
	t.Logf("log:\n%s", l)
	for _, want := range []string{
		"pins " + pins + ": not a regular file (a FIFO)",
		entry + ": not a regular file (a FIFO)",
		batch + ": a symbolic link",
	} {
		if !strings.Contains(l, want) {
			t.Errorf("log does not report %q", want)
		}
	}
}
