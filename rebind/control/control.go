// Package control is the daemon's control socket: a Unix stream socket
// (mode 0600 in a directory only root can write, created 0700, normally
// /run/nvmet-rebind/control.sock)
// that takes one JSON request per connection and answers one JSON response.
// Peers are checked with SO_PEERCRED: only root (or the daemon's own uid)
// may talk to it.
//
// At its limits the socket degrades, it does not end the daemon:
//
//   - An accept that fails for want of resources (EMFILE, ENFILE, ENOBUFS,
//     ENOMEM, ECONNABORTED) is retried after a backoff, 5 ms doubling to
//     1 s as net/http's Server does, reset by the next accept that works;
//     the connection waits in the kernel's listen backlog meanwhile. Each
//     such episode logs one warning (and one line when it ends).
//   - At most maxConns (64) connections are served at once. A connection
//     arriving when all are taken takes the slot of the oldest one still
//     waiting for its request (that one is answered "dropped" and closed);
//     when every slot is running a request it is answered "busy" and
//     closed at once, before anything is read from it. Either way the
//     client gets an error naming the limit, never a hang.
//   - Each connection has 30 s for everything (connDeadline) and a request
//     is at most 64 KiB (maxRequest).
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/owndir"
)

// Request is what a client sends.
type Request struct {
	Cmd string `json:"cmd"`          // "status", "trigger", "reload", "rebind"
	ID  string `json:"id,omitempty"` // rebind: port id or portal id; reload: the config file the client means
}

// Response is what the daemon answers.
type Response struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Refused: the daemon refused the caller (its uid), read nothing.
	Refused bool            `json:"refused,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// Handler serves one request.
type Handler func(ctx context.Context, req Request) (any, error)

// maxRequest bounds a request.
const maxRequest = 64 << 10

// connDeadline bounds a connection's reads and writes, from its accept.
const connDeadline = 30 * time.Second

// maxConns caps the connections served at once (each is a goroutine and a
// file descriptor). The clients are the CLI and scripts, one request each,
// a few at a time: 64 is far above real use and far below the fd limit.
// Past it a newcomer takes the slot of the oldest connection still
// waiting for its request, or is refused at once (see admit): blocking the
// accept loop instead would leave clients hanging in the listen backlog
// behind idle connections for up to connDeadline.
const maxConns = 64

// The backoff after an accept failed for want of resources, as net/http's
// Server: acceptBackoffMin doubling to acceptBackoffMax.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// Server serves the control socket.
type Server struct {
	path    string
	ln      *net.UnixListener
	handler Handler
	log     *slog.Logger // nil: slog.Default()
	// Allowed decides whether a peer uid may use the socket.
	mu      sync.Mutex
	allowed func(uid uint32) bool
	wg      sync.WaitGroup

	acceptErrs atomic.Int64 // accepts failed for want of resources

	cmu     sync.Mutex
	conns   []*conn // the connections holding a slot, oldest first
	full    bool    // the cap was reached: warned, until half the slots are free
	peak    int     // most slots ever held at once (tests)
	dropped int     // connections that lost their slot to a newcomer
	refused int     // connections refused at once: every slot running a request
}

// conn is one connection holding a slot.
type conn struct {
	c        *net.UnixConn
	since    time.Time
	handling bool // its request was read: it keeps its slot until it ends
	dropped  bool // its slot went to a newcomer: answer "dropped" and close
}

// SetLog sets where the server logs (default slog.Default()); call it
// before Serve.
func (s *Server) SetLog(l *slog.Logger) { s.log = l }

func (s *Server) logger() *slog.Logger {
	if s.log == nil {
		return slog.Default()
	}
	return s.log
}

// Listen creates the socket at path (a missing directory is created with
// mode 0700; an existing one keeps its mode and is refused when others can
// write it: owndir.Ensure; a stale socket from a crashed daemon is
// replaced). Only uid 0 and the daemon's own uid may connect.
func Listen(path string, h Handler) (*Server, error) {
	if err := owndir.Ensure(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("control socket %s: run dir: %w", path, err)
	}
	if Answers(path) {
		return nil, fmt.Errorf("control socket %s: another daemon is answering on it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket %s: remove stale socket: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	self := uint32(os.Getuid())
	return &Server{path: path, ln: ln, handler: h, allowed: func(uid uint32) bool { return uid == 0 || uid == self }}, nil
}

// Serve accepts connections until ctx is done (then it returns nil, once
// the connections being served have ended). An accept that fails for want
// of resources never ends it (see temporary): it logs one warning per
// episode, backs off and goes on. Any other accept error means the
// listener is closed or broken, and is returned.
func (s *Server) Serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		s.ln.Close()
	}()
	defer s.wg.Wait()
	var (
		backoff time.Duration
		failed  int       // accepts failed in this episode
		since   time.Time // the episode's first failure
	)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !temporary(err) {
				return fmt.Errorf("control socket %s: accept: %w", s.path, err)
			}
			s.acceptErrs.Add(1)
			if failed == 0 {
				since = time.Now()
				s.logger().Warn("control socket: accept failed for want of resources; backing off (5ms doubling to 1s) and retrying",
					"socket", s.path, "err", err)
			}
			failed++
			backoff = nextBackoff(backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		if failed > 0 {
			s.logger().Info("control socket: accepting again", "socket", s.path,
				"failed_accepts", failed, "after", time.Since(since).Round(time.Millisecond))
			failed, backoff = 0, 0
		}
		// The deadline is set here, before the connection can lose its
		// slot (which moves its read deadline to now).
		c.SetDeadline(time.Now().Add(connDeadline))
		cn := s.admit(c)
		if cn == nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.release(cn)
			s.serve(ctx, cn)
		}()
	}
}

// nextBackoff is the wait after one more failed accept: acceptBackoffMin
// doubling to acceptBackoffMax (d is the previous wait, 0 for none).
func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return acceptBackoffMin
	}
	return min(2*d, acceptBackoffMax)
}

// temporary tells an accept that failed for want of resources — file
// descriptors (EMFILE, ENFILE), kernel memory (ENOBUFS, ENOMEM) — or
// because the peer went away first (ECONNABORTED): the listener is fine,
// and a later accept may work.
func temporary(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// admit gives c a slot, and returns it; nil if c was refused (and closed).
// A free slot is taken first; with all maxConns taken, the slot of the
// oldest connection still waiting for its request (idle, or sending
// slowly) goes to c, and that one is answered "dropped" and closed by its
// goroutine; when every slot is running a request, c is answered "busy"
// and closed at once, nothing read from it. The first time the cap is
// reached logs a warning, again only after half the slots were free.
func (s *Server) admit(c *net.UnixConn) *conn {
	cn := &conn{c: c, since: time.Now()}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if len(s.conns) >= maxConns {
		if !s.full {
			s.full = true
			s.logger().Warn("control socket: at its limit of connections; the oldest waiting for its request are dropped for newcomers, newcomers refused while every one runs a request",
				"socket", s.path, "limit", maxConns)
		}
		victim := -1
		for i, o := range s.conns {
			if !o.handling {
				victim = i
				break
			}
		}
		if victim < 0 {
			s.refused++
			// A fresh socket's send buffer is empty: this write does not
			// block (and its deadline makes sure).
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			json.NewEncoder(c).Encode(Response{Error: fmt.Sprintf("control socket busy: all %d connections are running a request; try again", maxConns)})
			c.Close()
			return nil
		}
		o := s.conns[victim]
		o.dropped = true
		o.c.SetReadDeadline(time.Now()) // its goroutine answers and closes
		s.conns = append(s.conns[:victim], s.conns[victim+1:]...)
		s.dropped++
	}
	s.conns = append(s.conns, cn)
	s.peak = max(s.peak, len(s.conns))
	return cn
}

// handling marks cn's request read: it keeps its slot. False if its slot
// went to a newcomer already.
func (s *Server) handling(cn *conn) bool {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if cn.dropped {
		return false
	}
	cn.handling = true
	return true
}

// isDropped tells whether cn's slot went to a newcomer.
func (s *Server) isDropped(cn *conn) bool {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return cn.dropped
}

// release frees cn's slot (if it still has one).
func (s *Server) release(cn *conn) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	for i, o := range s.conns {
		if o == cn {
			s.conns = append(s.conns[:i], s.conns[i+1:]...)
			break
		}
	}
	if len(s.conns) <= maxConns/2 {
		s.full = false
	}
}

// serve answers cn's one request; its deadline (connDeadline) was set at
// accept.
func (s *Server) serve(ctx context.Context, cn *conn) {
	c := cn.c
	defer c.Close()
	enc := json.NewEncoder(c)
	uid, err := peerUID(c)
	if err != nil {
		enc.Encode(Response{Error: "peer credentials: " + err.Error()})
		return
	}
	s.mu.Lock()
	allowed := s.allowed
	s.mu.Unlock()
	if !allowed(uid) {
		enc.Encode(Response{Error: fmt.Sprintf("uid %d is not allowed: the control socket is for root", uid), Refused: true})
		return
	}
	var req Request
	if err := json.NewDecoder(io.LimitReader(bufio.NewReader(c), maxRequest)).Decode(&req); err != nil {
		if s.isDropped(cn) {
			enc.Encode(Response{Error: fmt.Sprintf("dropped: the control socket is at its limit of %d connections and this one sent no request in %v",
				maxConns, time.Since(cn.since).Round(time.Millisecond))})
			return
		}
		enc.Encode(Response{Error: "bad request: " + err.Error()})
		return
	}
	if !s.handling(cn) {
		enc.Encode(Response{Error: fmt.Sprintf("dropped: the control socket is at its limit of %d connections", maxConns)})
		return
	}
	res, err := s.handler(ctx, req)
	if err != nil {
		enc.Encode(Response{Error: err.Error()})
		return
	}
	b, err := json.Marshal(res)
	if err != nil {
		enc.Encode(Response{Error: err.Error()})
		return
	}
	enc.Encode(Response{OK: true, Result: b})
}

// Answers reports whether a daemon accepts connections on the socket at
// path (a stale socket of a crashed daemon refuses them).
func Answers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// ErrNoDaemon means nothing answers on the socket.
var ErrNoDaemon = errors.New("no daemon is running")

// ErrRefused means the caller may not use the socket: the daemon refused
// its uid, or the mode of the socket or of a directory above it refused
// the connect (EACCES, EPERM: whether a daemon runs there cannot be told
// then). It is never ErrNoDaemon.
var ErrRefused = errors.New("the control socket refused this caller")

// Call sends one request and decodes the result into out (may be nil).
func Call(ctx context.Context, path string, req Request, out any) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: uid %d may not connect to %s: %w", ErrRefused, os.Geteuid(), path, err)
	}
	if err != nil {
		return fmt.Errorf("%w (%v)", ErrNoDaemon, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	// The daemon may answer (e.g. refuse the peer) and close before
	// reading the request: a failed write still leaves its answer to read.
	werr := json.NewEncoder(c).Encode(req)
	var resp Response
	if err := json.NewDecoder(io.LimitReader(c, 64<<20)).Decode(&resp); err != nil {
		if werr != nil {
			err = werr
		}
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if !resp.OK && resp.Refused {
		return fmt.Errorf("%w: %s", ErrRefused, resp.Error)
	}
	if !resp.OK {
		return errors.New(resp.Error)
	}
	if out != nil && len(resp.Result) > 0 {
		return json.Unmarshal(resp.Result, out)
	}
	return nil
}
