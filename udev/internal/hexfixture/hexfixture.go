// Package hexfixture reads the recorded kernel datagrams of udev's tests:
// one datagram a line in hex, blank lines and # comments skipped.
package hexfixture

import (
	"bufio"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// Read returns the datagrams of the fixture file path, failing tb when it
// cannot be read or a line is not hex.
func Read(tb testing.TB, path string) [][]byte {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		out = append(out, b)
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return out
}
