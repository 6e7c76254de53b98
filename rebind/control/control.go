// Package control is the daemon's control socket: a Unix stream socket
// (mode 0600 in a 0700 directory, normally /run/nvmet-rebind/control.sock)
// that takes one JSON request per connection and answers one JSON response.
// Peers are checked with SO_PEERCRED: only root (or the daemon's own uid)
// may talk to it.
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Request is what a client sends.
type Request struct {
	Cmd string `json:"cmd"`          // "status", "trigger", "reload", "rebind"
	ID  string `json:"id,omitempty"` // rebind: port id or portal id
}

// Response is what the daemon answers.
type Response struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Handler serves one request.
type Handler func(ctx context.Context, req Request) (any, error)

// maxRequest bounds a request.
const maxRequest = 64 << 10

// Server serves the control socket.
type Server struct {
	path    string
	ln      *net.UnixListener
	handler Handler
	// Allowed decides whether a peer uid may use the socket.
	mu      sync.Mutex
	allowed func(uid uint32) bool
	wg      sync.WaitGroup
}

// Listen creates the socket at path (its directory is created with mode
// 0700; a stale socket from a crashed daemon is replaced). Only uid 0 and
// the daemon's own uid may connect.
func Listen(path string, h Handler) (*Server, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
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

// Serve accepts connections until ctx is done.
func (s *Server) Serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		s.ln.Close()
	}()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("control socket %s: accept: %w", s.path, err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serve(ctx, c)
		}()
	}
}

func (s *Server) serve(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
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
		enc.Encode(Response{Error: fmt.Sprintf("uid %d is not allowed: the control socket is for root", uid)})
		return
	}
	var req Request
	if err := json.NewDecoder(io.LimitReader(bufio.NewReader(c), maxRequest)).Decode(&req); err != nil {
		enc.Encode(Response{Error: "bad request: " + err.Error()})
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

// ErrNoDaemon means nothing answers on the socket.
var ErrNoDaemon = errors.New("no daemon is running")

// Call sends one request and decodes the result into out (may be nil).
func Call(ctx context.Context, path string, req Request, out any) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
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
	if !resp.OK {
		return errors.New(resp.Error)
	}
	if out != nil && len(resp.Result) > 0 {
		return json.Unmarshal(resp.Result, out)
	}
	return nil
}
