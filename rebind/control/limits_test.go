//go:build linux

package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests below poll with generous deadlines: they must pass on a busy
// machine, and they assert what happens, not how fast.
const patience = 60 * time.Second

// eventually polls cond until it holds, or fails the test after patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(patience); !cond(); {
		if time.Now().After(end) {
			for _, n := range fds(t) { // what was open, for the failure
				l, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", n))
				t.Logf("fd %d -> %s", n, l)
			}
			t.Fatalf("after %v: still not %s", patience, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sockets counts this process's open sockets: what the server's
// connections hold (the runtime's own descriptors, epoll and the like,
// are not counted: they may come and go).
func sockets(t *testing.T) int {
	t.Helper()
	n := 0
	for _, fd := range fds(t) {
		if l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// fds lists this process's open file descriptors (the one reading
// /proc/self/fd included: the count is the same from call to call).
func fds(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// limitsServer starts a server on a fresh socket; stop cancels it and
// checks Serve returned nil.
func limitsServer(t *testing.T, h Handler) (s *Server, path string, logs *syncBuffer, done <-chan error, stop func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "control.sock")
	if h == nil {
		h = func(_ context.Context, r Request) (any, error) { return map[string]string{"cmd": r.Cmd}, nil }
	}
	s, err := Listen(path, h)
	if err != nil {
		t.Fatal(err)
	}
	logs = new(syncBuffer)
	s.SetLog(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- s.Serve(ctx) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(patience):
			t.Error("Serve did not stop")
		}
	}
	t.Cleanup(stop)
	call(t, path, "status")
	// The answer reaches the client before the server's goroutine frees
	// the slot: a test that counts slots starts from none held.
	eventually(t, "the first request's slot freed", func() bool { return s.held() == 0 })
	return s, path, logs, ch, stop
}

// call makes one request and wants it answered.
func call(t *testing.T, path, cmd string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	var out map[string]string
	if err := Call(ctx, path, Request{Cmd: cmd}, &out); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	if out["cmd"] != cmd {
		t.Fatalf("%s: answered %v", cmd, out)
	}
}

func (s *Server) held() int {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return len(s.conns)
}

func (s *Server) counts() (peak, dropped, refused int) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.peak, s.dropped, s.refused
}

func serving(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Serve ended: %v", err)
	default:
	}
}

// TestAcceptEMFILE: with the fd limit reached, accept fails with EMFILE;
// Serve logs it once, backs off, goes on, and answers the waiting client
// once fds are free again. Every fd is given back.
func TestAcceptEMFILE(t *testing.T) {
	s, path, logs, done, stop := limitsServer(t, nil)
	before := sockets(t)

	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
				t.Errorf("restore RLIMIT_NOFILE: %v", err)
			}
		}
	}
	t.Cleanup(restore)
	// A limit a little above the highest fd in use, then /dev/null opened
	// until none is left, then one closed for the client: the server's
	// accept is left with none.
	top := 0
	for _, n := range fds(t) {
		top = max(top, n)
	}
	low := orig
	low.Cur = uint64(top + 1 + 16)
	if low.Cur > orig.Cur {
		t.Skipf("fd limit %d already below %d", orig.Cur, low.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fill []*os.File
	closeFill := func() {
		for _, f := range fill {
			f.Close()
		}
		fill = nil
	}
	defer closeFill()
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fill = append(fill, f)
		if len(fill) > 1000 {
			t.Fatal("no EMFILE after 1000 files")
		}
	}
	fill[len(fill)-1].Close()
	fill = fill[:len(fill)-1]
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Backoffs of 5, 10, 20 and 40 ms: the loop goes on.
	eventually(t, "4 failed accepts", func() bool { serving(t, done); return s.acceptErrs.Load() >= 4 })
	if n := strings.Count(logs.String(), "accept failed"); n != 1 {
		t.Errorf("%d warnings for one episode, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "too many open files") || !strings.Contains(logs.String(), "backing off") {
		t.Errorf("the warning does not say why and what it does:\n%s", logs)
	}

	// Fds free again (the low limit kept): the waiting client is answered,
	// and so is a new one.
	closeFill()
	c.SetDeadline(time.Now().Add(patience))
	if err := json.NewEncoder(c).Encode(Request{Cmd: "waited"}); err != nil {
		t.Fatal(err)
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		t.Fatal(err)
	}
	if !resp.OK || !strings.Contains(string(resp.Result), "waited") {
		t.Fatalf("answer %+v", resp)
	}
	call(t, path, "after")
	c.Close()
	serving(t, done)
	if n := strings.Count(logs.String(), "accept failed"); n != 1 {
		t.Errorf("%d warnings for one episode, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "accepting again") {
		t.Errorf("the end of the episode is not logged:\n%s", logs)
	}
	restore()
	eventually(t, fmt.Sprintf("back to %d sockets", before), func() bool { return sockets(t) == before })

	// A second episode warns again (the episode was reset by the accept).
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored = false
	errs := s.acceptErrs.Load()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fill = append(fill, f)
	}
	fill[len(fill)-1].Close()
	fill = fill[:len(fill)-1]
	c2, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a failed accept", func() bool { return s.acceptErrs.Load() > errs })
	closeFill()
	restore()
	c2.Close()
	eventually(t, "a second warning", func() bool { return strings.Count(logs.String(), "accept failed") == 2 })
	call(t, path, "again")
	stop()
	eventually(t, fmt.Sprintf("back to %d sockets", before-1), func() bool { return sockets(t) == before-1 }) // the listener gone
}

// TestConnectionFlood: 200 connections that send nothing. The server holds
// 64 of them at most; the others are answered "dropped" and closed while
// the flood goes on; a real request is answered while the flood is held,
// and every fd comes back once the flood closes.
func TestConnectionFlood(t *testing.T) {
	const flood = 200
	s, path, logs, done, _ := limitsServer(t, nil)
	before := sockets(t)

	var (
		mu     sync.Mutex
		closed int // flood connections the server closed
		told   int // of which, answered "dropped"
		wg     sync.WaitGroup
	)
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := io.ReadAll(c)
			if err != nil && errors.Is(err, net.ErrClosed) {
				return // closed by the test
			}
			mu.Lock()
			defer mu.Unlock()
			closed++
			if strings.Contains(string(b), "dropped") {
				told++
			}
		}()
	}
	nclosed := func() int { mu.Lock(); defer mu.Unlock(); return closed }
	eventually(t, fmt.Sprintf("%d flood connections closed by the server", flood-maxConns), func() bool {
		return nclosed() == flood-maxConns
	})
	eventually(t, fmt.Sprintf("%d sockets (the flood and %d held)", before+flood+maxConns, maxConns), func() bool {
		return sockets(t) == before+flood+maxConns
	})
	if h := s.held(); h != maxConns {
		t.Errorf("%d held, want %d", h, maxConns)
	}
	serving(t, done)

	// A real request while the flood is held: answered (it takes the
	// oldest idle connection's slot), long before the held ones' 30 s.
	start := time.Now()
	call(t, path, "status")
	took := time.Since(start)
	t.Logf("a request during the flood took %v", took)
	if took > connDeadline/2 {
		t.Errorf("a request during the flood took %v: it waited for a slot", took)
	}
	eventually(t, "the oldest flood connection dropped for it", func() bool { return nclosed() == flood-maxConns+1 })

	peak, dropped, refused := s.counts()
	if peak > maxConns {
		t.Errorf("held %d connections at once, the cap is %d", peak, maxConns)
	}
	if dropped != flood-maxConns+1 || refused != 0 {
		t.Errorf("dropped %d, refused %d; want %d, 0", dropped, refused, flood-maxConns+1)
	}
	mu.Lock()
	if told != closed {
		t.Errorf("%d of %d closed connections were told why", told, closed)
	}
	mu.Unlock()
	if n := strings.Count(logs.String(), "at its limit"); n != 1 {
		t.Errorf("%d warnings for one flood, want 1:\n%s", n, logs)
	}

	for _, c := range conns {
		c.Close()
	}
	conns = nil
	wg.Wait()
	eventually(t, "no connection held", func() bool { return s.held() == 0 })
	eventually(t, fmt.Sprintf("back to %d sockets", before), func() bool { return sockets(t) == before })
	call(t, path, "after")
}

// TestBusyRefused: when every slot is running a request, a newcomer is
// answered "busy" at once; the 64 requests complete.
func TestBusyRefused(t *testing.T) {
	release := make(chan struct{})
	var (
		mu      sync.Mutex
		running int
	)
	s, path, _, _, _ := limitsServer(t, func(_ context.Context, r Request) (any, error) {
		if r.Cmd == "block" {
			mu.Lock()
			running++
			mu.Unlock()
			<-release
		}
		return map[string]string{"cmd": r.Cmd}, nil
	})
	errs := make(chan error, maxConns)
	for range maxConns {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
			defer cancel()
			errs <- Call(ctx, path, Request{Cmd: "block"}, nil)
		}()
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	eventually(t, fmt.Sprintf("%d requests running", maxConns), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running == maxConns
	})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	err := Call(ctx, path, Request{Cmd: "status"}, nil)
	if err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("a request with every slot running: %v, want busy", err)
	}
	if _, _, refused := s.counts(); refused != 1 {
		t.Errorf("refused %d, want 1", refused)
	}
	close(release)
	for range maxConns {
		if err := <-errs; err != nil {
			t.Errorf("blocked request: %v", err)
		}
	}
	eventually(t, "no connection held", func() bool { return s.held() == 0 })
	call(t, path, "status")
}

func TestBackoff(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); len(got) < 10; {
		d = nextBackoff(d)
		got = append(got, d)
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoffs %v", got)
		}
	}
}

func TestTemporary(t *testing.T) {
	wrap := func(e error) error {
		return &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", e)}
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if !temporary(wrap(e)) {
			t.Errorf("%v: not temporary", e)
		}
	}
	for _, e := range []error{syscall.EBADF, syscall.EINVAL, syscall.ENOTSOCK, net.ErrClosed} {
		if temporary(wrap(e)) {
			t.Errorf("%v: temporary", e)
		}
	}
}
