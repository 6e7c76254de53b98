package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// readHexAnswers reads a recording of testdata (copied from
// ../shared/testdata/kernel-6.1: one datagram per line in hex, # comments,
// the request first) and returns its answer datagrams.
func readHexAnswers(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dgrams [][]byte
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		d, err := hex.DecodeString(line)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		dgrams = append(dgrams, d)
	}
	if len(dgrams) < 2 {
		t.Fatalf("%s: %d datagrams, want a request and its answer", path, len(dgrams))
	}
	return dgrams[1:]
}

// The poll's netlink reading gives, for every recorded cm_id dump, the
// entries `rdma -j resource show cm_id` printed for the same tables:
// device, port (absent for wildcard children), cm-idn, state, the owner
// (kern-name, or the pid of a process's), source address and port.
func TestReadCMIDsIsRdma(t *testing.T) {
	for _, s := range []string{"s1", "s1c", "s1m", "s1u", "s1r", "s3", "s4"} {
		t.Run(s, func(t *testing.T) {
			files, _ := filepath.Glob(filepath.Join("testdata", s+"-nldev-res-cm-id-get-dump-*.hex"))
			if len(files) == 0 {
				t.Fatal("no recording")
			}
			var got []cmID
			for _, f := range files {
				var msgs [][]byte
				done := false
				for _, d := range readHexAnswers(t, f) {
					var err error
					if done, err = messages(d, &msgs); err != nil {
						t.Fatalf("%s: %v", f, err)
					}
				}
				if !done {
					t.Fatalf("%s: no NLMSG_DONE", f)
				}
				ids, err := parseCMIDs(msgs)
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				got = append(got, ids...)
			}
			b, err := os.ReadFile(filepath.Join("testdata", s+"-rdma-j-d-resource-show-cm_id.json"))
			if err != nil {
				t.Fatal(err)
			}
			var want []cmID
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if want[i].PID != 0 {
					want[i].Comm = "" // rdma names the process; the poll needs kernel owners only
				}
			}
			order := func(a, b cmID) int {
				if c := strings.Compare(a.IfName, b.IfName); c != 0 {
					return c
				}
				return a.IDN - b.IDN
			}
			slices.SortFunc(got, order)
			slices.SortFunc(want, order)
			if g, w := show(got), show(want); g != w {
				t.Errorf("netlink reading:\n%s\nrdma -j:\n%s", g, w)
			}
		})
	}
}

func show(ids []cmID) string {
	var b strings.Builder
	for _, c := range ids {
		port := "-"
		if c.Port != nil {
			port = fmt.Sprint(*c.Port)
		}
		fmt.Fprintf(&b, "%s port %s cm-idn %d %s comm %q pid %v src %s\n", c.IfName, port, c.IDN, c.State, c.Comm, c.PID != 0, c.Src)
	}
	return b.String()
}

// A device deleted before its cm_id dump answers NLMSG_DONE with EINVAL
// (recorded on 6.1): the reading skips it.
func TestMessagesDeletedDevice(t *testing.T) {
	for _, f := range []string{"s2-nldev-res-cm-id-get-dump-missing-dev.hex", "s2-nldev-res-cm-id-get-dump-missing-dev-extack.hex"} {
		var msgs [][]byte
		done, err := messages(readHexAnswers(t, filepath.Join("testdata", f))[0], &msgs)
		if !done || !errors.Is(err, syscall.EINVAL) || len(msgs) != 0 {
			t.Errorf("%s: done %v, %v, %d messages; want done, EINVAL, none", f, done, err, len(msgs))
		}
	}
}
