package state_test

// Journal entries and pins.json that are not regular files (a FIFO, a
// device, a directory, a symlink): reported and quarantined like any other
// bad entry, within a bound on time and memory, never followed or waited
// on.

import (
	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded/boundedtest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// inTime fails the test if f does not return within 5 s.
func inTime(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked for 5 s", what)
	}
}

// hostileFiles makes path one of the kinds of file the daemon never writes.
var hostileFiles = []struct {
	name, want string
	make       func(t *testing.T, path string)
}{
	{"FIFO", "not a regular file (a FIFO)", func(t *testing.T, path string) {
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
	}},
	{"FIFO with a silent writer", "not a regular file (a FIFO)", func(t *testing.T, path string) { boundedtest.FIFOWithWriter(t, path) }},
	{"character device", "not a regular file (a character device)", func(t *testing.T, path string) {
		// /dev/null's numbers (1, 3): needs CAP_MKNOD.
		if err := syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
			t.Skipf("mknod: %v", err)
		}
	}},
	{"directory", "not a regular file (a directory)", func(t *testing.T, path string) {
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
	}},
	{"symlink to /dev/zero", "a symbolic link", func(t *testing.T, path string) {
		if err := os.Symlink("/dev/zero", path); err != nil {
			t.Fatal(err)
		}
	}},
	{"symlink to a FIFO", "a symbolic link", func(t *testing.T, path string) {
		fifo := filepath.Join(t.TempDir(), "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fifo, path); err != nil {
			t.Fatal(err)
		}
	}},
}

// TestHostileJournalEntry: a journal entry (single or batch) that is not a
// regular file is a bad entry: Load reports it by path and loads the
// others, Clean moves it aside; neither blocks.
func TestHostileJournalEntry(t *testing.T) {
	for _, kind := range []string{"single", "batch"} {
		for _, h := range hostileFiles {
			t.Run(kind+"/"+h.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				s := open(t, dir)
				if err := s.Put(nv("1", "single")); err != nil {
					t.Fatal(err)
				}
				if err := s.PutAll([]rebind.Intent{nv("2", "batch"), nv("3", "batch")}); err != nil {
					t.Fatal(err)
				}
				name := "batch-00000000000000000009.json"
				if kind == "single" {
					// The file a Put of key 7 writes, so that only what it
					// is makes it bad.
					before := names(t, dir)
					if err := s.Put(nv("7", "victim")); err != nil {
						t.Fatal(err)
					}
					for _, n := range names(t, dir) {
						if !slices.Contains(before, n) {
							name = n
						}
					}
					if err := os.Remove(filepath.Join(dir, "journal", name)); err != nil {
						t.Fatal(err)
					}
				}
				path := filepath.Join(dir, "journal", name)
				h.make(t, path)
				want := map[rebind.Key]string{nk("1"): "single", nk("2"): "batch", nk("3"): "batch"}
				for _, r := range []*state.Store{state.OpenReadOnly(dir), open(t, dir)} {
					var m map[rebind.Key]rebind.Intent
					var bad []error
					inTime(t, "Load", func() { m, bad = r.Load() })
					if len(bad) != 1 || !strings.Contains(bad[0].Error(), "journal entry "+path+": "+h.want) {
						t.Errorf("Load reports %v, want journal entry %s: %s", bad, path, h.want)
					}
					if len(m) != len(want) {
						t.Errorf("Load read %d intents, want %d", len(m), len(want))
					}
				}
				var moved []error
				var err error
				inTime(t, "Clean", func() { moved, err = open(t, dir).Clean() })
				if err != nil || len(moved) != 1 || !strings.Contains(moved[0].Error(), path+": "+h.want) || !strings.Contains(moved[0].Error(), "moved aside") {
					t.Fatalf("Clean: %v %v", moved, err)
				}
				if _, err := os.Lstat(path + ".corrupt"); err != nil {
					t.Errorf("not quarantined: %v", err)
				}
				if got := addrs(t, s); len(got) != len(want) {
					t.Errorf("Load after Clean %v, want %v", got, want)
				}
			})
		}
	}
}

// TestSymlinkedJournalEntry: a symlink to a valid entry is not followed
// (the journal writes regular files only; a link may lead anywhere).
func TestSymlinkedJournalEntry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.Put(nv("1", "single")); err != nil {
		t.Fatal(err)
	}
	name := names(t, dir)[0]
	path := filepath.Join(dir, "journal", name)
	elsewhere := filepath.Join(t.TempDir(), name)
	if err := os.Rename(path, elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, path); err != nil {
		t.Fatal(err)
	}
	m, bad := s.Load()
	if len(m) != 0 || len(bad) != 1 || !strings.Contains(bad[0].Error(), path+": a symbolic link") {
		t.Errorf("Load = %v, %v; want the symlink reported, not followed", m, bad)
	}
}

// TestHostilePins: a pins.json that is not a regular file is an error
// naming it (the engine starts without pins), never a hang.
func TestHostilePins(t *testing.T) {
	for _, h := range hostileFiles {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := open(t, dir)
			path := filepath.Join(dir, "pins.json")
			h.make(t, path)
			var pins map[rebind.Key]uint64
			var err error
			inTime(t, "Pins", func() { pins, err = s.Pins() })
			if err == nil || !strings.Contains(err.Error(), "pins "+path+": "+h.want) || !strings.Contains(err.Error(), "remove it") || len(pins) != 0 {
				t.Errorf("Pins = %v, %v; want pins %s: %s", pins, err, path, h.want)
			}
			if h.name == "directory" {
				return // SavePins cannot rename over a directory
			}
			if err := s.SavePins(map[rebind.Key]uint64{nk("1"): 7}); err != nil {
				t.Fatal(err)
			}
			if pins, err := s.Pins(); err != nil || pins[nk("1")] != 7 {
				t.Errorf("Pins after SavePins = %v, %v", pins, err)
			}
		})
	}
}

// TestSymlinkedPins: a pins.json symlink to valid pins is not followed.
func TestSymlinkedPins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.SavePins(map[rebind.Key]uint64{nk("1"): 7}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "pins.json")
	elsewhere := filepath.Join(t.TempDir(), "pins.json")
	if err := os.Rename(path, elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, path); err != nil {
		t.Fatal(err)
	}
	if pins, err := s.Pins(); err == nil || !strings.Contains(err.Error(), "a symbolic link") || len(pins) != 0 {
		t.Errorf("Pins = %v, %v; want the symlink refused", pins, err)
	}
}
