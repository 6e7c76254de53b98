package rdma

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// addSeeds adds every nldev fixture's answer as (data, split): the answer
// datagrams joined, split at the end of the first.
func addSeeds(f *testing.F) {
	files, err := filepath.Glob("testdata/*-nldev-*.hex")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		ans := answers(f, filepath.Base(p))
		f.Add(bytes.Join(ans, nil), uint16(len(ans[0])))
	}
}

// fuzzDatagrams splits data into one or two datagrams at split.
func fuzzDatagrams(data []byte, split uint16) [][]byte {
	k := int(split)
	if k == 0 || k >= len(data) {
		return [][]byte{data}
	}
	return [][]byte{data[:k], data[k:]}
}

func FuzzParseCMIDs(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		ids, err := ParseCMIDs(fuzzDatagrams(data, split))
		if err != nil {
			if ids != nil {
				t.Fatalf("entries and error: %v", err)
			}
			return
		}
		for _, c := range ids {
			if c.Src.Addr().Is4In6() || c.Dst.Addr().Is4In6() {
				t.Fatalf("IPv4-mapped address in %+v", c)
			}
		}
	})
}

func FuzzParseDevices(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		dgs := fuzzDatagrams(data, split)
		devs, err := ParseDevices(dgs)
		if err != nil {
			return
		}
		// What the engine relies on: a name without NUL (it becomes a
		// sysfs path element), and the same answer for the same bytes.
		for _, d := range devs {
			if strings.ContainsRune(d.Name, 0) || strings.ContainsRune(d.Protocol, 0) {
				t.Fatalf("NUL in %+v", d)
			}
		}
		again, err := ParseDevices(dgs)
		if err != nil || !reflect.DeepEqual(devs, again) {
			t.Fatalf("second parse differs: %+v / %+v, %v", devs, again, err)
		}
	})
}

func FuzzParsePorts(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		dgs := fuzzDatagrams(data, split)
		ports, err := ParsePorts(dgs)
		if err != nil {
			return
		}
		for _, p := range ports {
			if strings.ContainsRune(p.Netdev, 0) {
				t.Fatalf("NUL in %+v", p)
			}
		}
		again, err := ParsePorts(dgs)
		if err != nil || !reflect.DeepEqual(ports, again) {
			t.Fatalf("second parse differs: %+v / %+v, %v", ports, again, err)
		}
	})
}

func BenchmarkParseCMIDs(b *testing.B) {
	ans := answers(b, "s1m-nldev-res-cm-id-get-dump-rxe0.hex")
	b.ReportAllocs()
	for b.Loop() {
		ids, err := ParseCMIDs(ans)
		if err != nil || len(ids) != 44 {
			b.Fatalf("ParseCMIDs = %d, %v", len(ids), err)
		}
	}
}
