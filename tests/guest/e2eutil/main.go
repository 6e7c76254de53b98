// Command e2eutil is a small static helper for the guest scripts of the
// end-to-end tests: a clock with microseconds (busybox date has none), a
// LISTEN check by `rdma -j resource show cm_id` and a LISTEN poll by RDMA
// netlink that rdma confirms, a reader for
// `nvmet-rebind status --json` and a median/max calculator. It asserts
// nothing by itself: the scripts decide.
//
//	e2eutil now                               unix time in µs
//	e2eutil since US                          ms elapsed since US (one decimal)
//	e2eutil listening -comm C -addr A -port P [-dev D] [-wild]
//	                                          exit 0 if such a LISTEN cm_id exists now
//	                                          (-comm tcp: a TCP socket in LISTEN)
//	e2eutil wait-listen ... [-absent] [-since US] [-timeout 10s] [-interval 20ms]
//	                                          poll until present (or absent), as a real-time
//	                                          task (SCHED_FIFO), by RDMA netlink (nldev.go);
//	                                          print ms since US once rdma agrees (else exit 3)
//	e2eutil wait-count -n N [-since US] [-timeout 60s] [-interval 20ms]
//	                                          poll as wait-listen until N bound LISTEN cm_ids
//	                                          exist; print ms since US to the first and to
//	                                          all N once rdma counts N too (else exit 3)
//	e2eutil wait-entries -dir D -n N [-since US] [-timeout 60s] [-interval 10ms]
//	                                          poll until directory D lists N entries; print
//	                                          ms since US (exit 1 with the count at timeout)
//	e2eutil status < json                     one line per listener: key=value …
//	e2eutil stats V...                        n=… median=… max=… min=…
//	e2eutil nvmetcli-restore FILE [CONFIGFS]  nvmetcli's restore and its stopping rule (restore.go)
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "now":
		fmt.Println(time.Now().UnixMicro())
	case "since":
		if len(os.Args) != 3 {
			usage()
		}
		us, err := strconv.ParseInt(os.Args[2], 10, 64)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("%.1f\n", float64(time.Now().UnixMicro()-us)/1000)
	case "listening", "wait-listen":
		os.Exit(listen(os.Args[1], os.Args[2:]))
	case "wait-count":
		os.Exit(waitCount(os.Args[2:]))
	case "wait-entries":
		os.Exit(waitEntries(os.Args[2:]))
	case "status":
		os.Exit(status(os.Stdin, os.Stdout))
	case "stats":
		os.Exit(stats(os.Args[2:]))
	case "nvmetcli-restore":
		os.Exit(restore(os.Args[2:]))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: e2eutil now|since US|listening|wait-listen|wait-count|status|stats (see source)")
	os.Exit(2)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "e2eutil:", err)
	os.Exit(2)
}

// cmID is one entry of `rdma -j resource show cm_id`, or of readCMIDs.
type cmID struct {
	IfName string `json:"ifname"`
	Port   *int   `json:"port"`
	IDN    int    `json:"cm-idn"`
	State  string `json:"state"`
	PID    int    `json:"pid"`
	Comm   string `json:"comm"` // rdma: a process's comm too; readCMIDs: the kernel owner's only
	Src    string `json:"src-addr"`
}

// srcMatches compares rdma's "addr:port" (IPv6 without brackets) with the
// wanted address and port.
func srcMatches(src string, addr netip.Addr, port string) bool {
	i := strings.LastIndexByte(src, ':')
	if i < 0 || src[i+1:] != port {
		return false
	}
	a, err := netip.ParseAddr(src[:i])
	return err == nil && a.Unmap() == addr.Unmap()
}

func listen(cmd string, args []string) int {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	comm := fs.String("comm", "", "kernel name of the cm_id owner: nvmet_rdma or ib_isert (empty: any); tcp: a TCP socket in LISTEN (/proc/net/tcp, tcp6)")
	addr := fs.String("addr", "", "listening address")
	port := fs.String("port", "", "listening port")
	dev := fs.String("dev", "", "RDMA device name (empty: any)")
	wild := fs.Bool("wild", false, "match wildcard children (no port index) instead of bound listeners")
	absent := fs.Bool("absent", false, "wait until no such listener exists")
	since := fs.Int64("since", 0, "start time in µs (e2eutil now); default: now")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after")
	interval := fs.Duration("interval", 20*time.Millisecond, "poll interval")
	fs.Parse(args)
	a, err := netip.ParseAddr(*addr)
	if err != nil || *port == "" {
		fatal(fmt.Errorf("%s: -addr and -port are required: %v", cmd, err))
	}
	start := time.Now()
	if *since == 0 {
		*since = start.UnixMicro()
	}
	if cmd == "wait-listen" {
		realtime()
	}
	if cmd == "listening" {
		found, err := present(rdmaCMIDs, *comm, a, *port, *dev, *wild)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2eutil:", err)
		}
		if found {
			return 0
		}
		return 1
	}
	for {
		found, err := present(readCMIDs, *comm, a, *port, *dev, *wild)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2eutil:", err)
		}
		if err == nil && found != *absent {
			ms := float64(time.Now().UnixMicro()-*since) / 1000
			// rdma judges what the poll saw, after the moment is taken.
			if judged, err := present(rdmaCMIDs, *comm, a, *port, *dev, *wild); err != nil || judged != found {
				fmt.Fprintf(os.Stderr, "e2eutil: the poll's netlink reading (listening: %v) and rdma (%v, %v) disagree\n", found, judged, err)
				return 3
			}
			fmt.Printf("%.1f\n", ms)
			return 0
		}
		if time.Since(start) > *timeout {
			fmt.Printf("timeout\n")
			return 1
		}
		time.Sleep(*interval)
	}
}

// waitCount is wait-count: the first LISTEN and the last of many (a
// layout of many ports), by the same poll as wait-listen.
func waitCount(args []string) int {
	fs := flag.NewFlagSet("wait-count", flag.ExitOnError)
	n := fs.Int("n", 0, "bound LISTEN cm_ids to wait for")
	since := fs.Int64("since", 0, "start time in µs (e2eutil now); default: now")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after")
	interval := fs.Duration("interval", 20*time.Millisecond, "poll interval")
	fs.Parse(args)
	if *n <= 0 {
		fatal(fmt.Errorf("wait-count: -n must be positive"))
	}
	start := time.Now()
	if *since == 0 {
		*since = start.UnixMicro()
	}
	ms := func() float64 { return float64(time.Now().UnixMicro()-*since) / 1000 }
	realtime()
	first, c := -1.0, 0
	for {
		ids, err := readCMIDs()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2eutil:", err)
		} else if c = bound(ids); c > 0 && first < 0 {
			first = ms()
		}
		if err == nil && c >= *n {
			all := ms()
			// rdma judges what the poll saw, after the moment is taken.
			if judged, err := rdmaCMIDs(); err != nil || bound(judged) < *n {
				fmt.Fprintf(os.Stderr, "e2eutil: the poll counted %d LISTEN and rdma %d (%v)\n", c, bound(judged), err)
				return 3
			}
			fmt.Printf("%.1f %.1f\n", first, all)
			return 0
		}
		if time.Since(start) > *timeout {
			fmt.Printf("timeout %d\n", c)
			return 1
		}
		time.Sleep(*interval)
	}
}

// waitEntries polls a directory (a port's subsystems/, say) until it lists
// n entries: the moment a healer's last link is made, to the poll's
// interval, without a fork per poll (a shell's `ls | wc -l` and `sleep`
// every 0.1 s took ~150 ms a turn under TCG). A normal task: a real-time
// one would take its readdir's CPU from the writes it waits for.
func waitEntries(args []string) int {
	fs := flag.NewFlagSet("wait-entries", flag.ExitOnError)
	dir := fs.String("dir", "", "directory to list")
	n := fs.Int("n", 0, "entries to wait for")
	since := fs.Int64("since", 0, "start time in µs (e2eutil now); default: now")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after")
	interval := fs.Duration("interval", 10*time.Millisecond, "poll interval")
	fs.Parse(args)
	if *dir == "" || *n <= 0 {
		fatal(fmt.Errorf("wait-entries: -dir and a positive -n are needed"))
	}
	start := time.Now()
	if *since == 0 {
		*since = start.UnixMicro()
	}
	c := 0
	for {
		names, err := readNames(*dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2eutil:", err)
		} else if c = len(names); c >= *n {
			fmt.Printf("%.1f\n", float64(time.Now().UnixMicro()-*since)/1000)
			return 0
		}
		if time.Since(start) > *timeout {
			fmt.Printf("timeout %d\n", c)
			return 1
		}
		time.Sleep(*interval)
	}
}

// readNames lists a directory's entries (no stat of each).
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// bound counts the LISTEN cm_ids bound to a device port (not wildcard
// children).
func bound(ids []cmID) int {
	c := 0
	for _, id := range ids {
		if id.State == "LISTEN" && id.Port != nil {
			c++
		}
	}
	return c
}

// realtime makes the wait a real-time task (SCHED_FIFO 50): every thread of
// the process, so that the goroutine polling, on whichever thread it runs,
// the `rdma` command that confirms (forked from such a thread, inheriting
// its policy), and threads made later (cloned from one of these) are
// real-time too. The poll itself forks nothing since 2026-12-04 (nldev.go).
// The moment a listener appears is then measured the same whatever else
// runs, e.g. the modprobe the kernel spawns for every iser=1 a healer
// writes side by side with its other writes.
// Setting only the calling thread left the poll starved when its commands
// ran from another thread: in ten daemon runs of shared-iser-scale, 14 to
// 408 ms between the daemon's binding write and the LISTEN seen, over
// 200 ms in six (BENCHMARKS.md). The goroutine stays on its thread
// (LockOSThread), so the commands are forked from a real-time thread from
// the start. Best effort: a kernel that refuses leaves the wait as it was.
func realtime() {
	runtime.LockOSThread()
	prio := int32(50)
	const schedFIFO = 1
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2eutil: wait-listen stays a normal task:", err)
		return
	}
	for _, t := range tids {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), schedFIFO, uintptr(unsafe.Pointer(&prio))); e != 0 {
			fmt.Fprintln(os.Stderr, "e2eutil: wait-listen stays a normal task:", e)
			return
		}
	}
}

// tcpListening reads /proc/net/tcp and tcp6 (not sock_diag, which the
// daemon uses: an independent witness) for a socket in LISTEN (state 0A)
// on addr:port. The kernel prints each address as the bytes of its 32-bit
// words in host order (little-endian here): 192.0.2.1:4420 is
// 010200C0:1144.
func tcpListening(addr netip.Addr, port string) (bool, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return false, err
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "0A" {
				continue
			}
			hexAddr, hexPort, ok := strings.Cut(fs[1], ":")
			if !ok {
				continue
			}
			lp, err := strconv.ParseUint(hexPort, 16, 16)
			if err != nil || lp != p {
				continue
			}
			raw := make([]byte, len(hexAddr)/2)
			for i := range raw {
				v, err := strconv.ParseUint(hexAddr[2*i:2*i+2], 16, 8)
				if err != nil {
					return false, fmt.Errorf("%s: %q", f, fs[1])
				}
				raw[i] = byte(v)
			}
			for w := 0; w+4 <= len(raw); w += 4 { // each 32-bit word little-endian
				raw[w], raw[w+1], raw[w+2], raw[w+3] = raw[w+3], raw[w+2], raw[w+1], raw[w]
			}
			a, ok := netip.AddrFromSlice(raw)
			if ok && a.Unmap() == addr.Unmap() {
				return true, nil
			}
		}
	}
	return false, nil
}

// present says whether a LISTEN cm_id of comm on addr:port (on device dev
// when not empty; a wildcard child when wild) is in the table read.
func present(read func() ([]cmID, error), comm string, addr netip.Addr, port, dev string, wild bool) (bool, error) {
	if comm == "tcp" {
		return tcpListening(addr, port)
	}
	ids, err := read()
	if err != nil {
		return false, err
	}
	for _, c := range ids {
		if c.State != "LISTEN" || (comm != "" && c.Comm != comm) || (dev != "" && c.IfName != dev) {
			continue
		}
		if wild != (c.Port == nil) {
			continue
		}
		if srcMatches(c.Src, addr, port) {
			return true, nil
		}
	}
	return false, nil
}

// rdmaCMIDs is `rdma -j resource show cm_id`.
func rdmaCMIDs() ([]cmID, error) {
	out, err := exec.Command("rdma", "-j", "resource", "show", "cm_id").Output()
	if err != nil {
		return nil, fmt.Errorf("rdma resource show cm_id: %v", err)
	}
	var ids []cmID
	if s := strings.TrimSpace(string(out)); s != "" {
		if err := json.Unmarshal([]byte(s), &ids); err != nil {
			return nil, fmt.Errorf("rdma -j resource show cm_id: %v: %q", err, s)
		}
	}
	return ids, nil
}

func status(in io.Reader, out io.Writer) int {
	var doc struct {
		Listeners []map[string]any `json:"listeners"`
	}
	data, err := io.ReadAll(in)
	if err != nil {
		fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		fmt.Fprintf(os.Stderr, "e2eutil status: %v: %q\n", err, data)
		return 2
	}
	for _, l := range doc.Listeners {
		keys := make([]string, 0, len(l))
		for k := range l {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			// kind and id first, reason last: easy to read and to grep.
			rank := func(k string) int {
				switch k {
				case "kind":
					return 0
				case "id":
					return 1
				case "reason":
					return 3
				}
				return 2
			}
			if rank(keys[i]) != rank(keys[j]) {
				return rank(keys[i]) < rank(keys[j])
			}
			return keys[i] < keys[j]
		})
		var parts []string
		for _, k := range keys {
			v := l[k]
			var s string
			switch x := v.(type) {
			case nil:
				s = "null"
			case string:
				s = x
				if k == "reason" || strings.ContainsAny(x, " \t") {
					s = strconv.Quote(x)
				}
			default:
				b, _ := json.Marshal(x)
				s = string(b)
			}
			parts = append(parts, k+"="+s)
		}
		fmt.Fprintln(out, strings.Join(parts, " "))
	}
	return 0
}

func stats(args []string) int {
	var v []float64
	for _, a := range args {
		f, err := strconv.ParseFloat(a, 64)
		if err != nil {
			continue
		}
		v = append(v, f)
	}
	if len(v) == 0 {
		fmt.Println("n=0")
		return 0
	}
	sort.Float64s(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	fmt.Printf("n=%d median=%.1f max=%.1f min=%.1f\n", len(v), med, v[len(v)-1], v[0])
	return 0
}
