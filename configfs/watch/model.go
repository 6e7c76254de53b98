package watch

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
)

// Options tune a Model; the zero value is usable.
type Options struct {
	// RescanEvery makes the first read after this long since the last
	// rescan a full rescan (compared with the model). 0: 10 minutes;
	// negative: never (the caller calls Rescan).
	RescanEvery time.Duration
	// IdentEvery spaces the identity checks of the top directories (a
	// module's tree replaced without events): a read checks when this long
	// has passed since the last check (default 20ms; negative: every
	// read). Bursts of reads (one before each write of a heal) share one.
	IdentEvery time.Duration
	// BigDir is the number of children from which a directory's are
	// indexed by name (below it, they are searched in a chain). 0: 8.
	BigDir int
	Logger *slog.Logger     // slog.Default when nil
	Now    func() time.Time // clock; time.Now when nil
}

// Stats counts what the model did since New.
type Stats struct {
	Rescans       uint64 // full rescans, New's included
	Disagreements uint64 // objects a trusted rescan found different from the model (bugs)
	Events        uint64 // inotify events applied
	Overflows     uint64 // IN_Q_OVERFLOW seen
	Watches       int    // inotify watches held now
	WatchErrors   uint64 // inotify_add_watch failures other than a missing directory
	Fallback      bool   // watches ran out: reads are full reads
	Reads         uint64 // Ops reads that went to configfs
	Hits          uint64 // Ops reads answered by the model
	MemoHits      uint64 // Ports, Portals, Subsystems answered whole (nothing changed since)
}

// Model is configfs as the daemon reads it, kept current by inotify. It
// implements the engine's Tree (rebind.Tree). Safe for concurrent use.
type Model struct {
	mu sync.Mutex
	// swapping counts the runs of iser writes made outside mu (SwapISERs)
	// not yet over: while one is, a rescan does not compare (the model's
	// answer and the rescan's may differ by that write).
	swapping int
	fs       *configfs.FS // the real tree: writes, and reads in fallback
	cfs      *configfs.FS // the same reads over the cache
	ops      configfs.Ops
	root     string
	log      *slog.Logger
	opts     Options

	fd       int
	buf      []byte
	rootNode *node                      // the tree of nodes (nil: none yet)
	big      map[*node]map[string]*node // the children of large directories, by name
	byWD     map[int32]*node            // live watches
	// keys are the sets of attribute names ReadAttrs was asked (a node
	// keeps the number of its set), lastVals the last values cached for
	// each (shared with the next when equal), nilErrs a shared slice of
	// nil errors, lastLink the last symlink target cached, errs the
	// errors nodes cache (few: a node flags it has some).
	keys     [][]string
	lastVals [][]string
	nilErrs  []error
	errs     map[*node]*nodeErrs
	// lastLists are short listings cached lately (shareList), nextList
	// the one to replace.
	lastLists [4][]string
	nextList  int
	lastLink  []string
	lastNQN   string           // the last Link.NQN that was not the link's name
	top       map[string]bool  // directories whose loss means a rescan
	topDepth  int              // how far under the root the deepest of them is
	idents    map[string]ident // the top directories' identity at the last rescan
	gen       uint64           // bumped at every invalidation
	// uncached counts reads answered by configfs and not kept (errors,
	// unwatched directories): a result built from one is not memoised.
	uncached uint64
	// Whole answers of Ports, Portals and Subsystems, valid while gen has
	// not moved: the event path reads an unchanged tree in O(1).
	memoPorts   memo[[]configfs.Port]
	memoPortals memo[[]configfs.Portal]
	memoSubsys  memo[[]string]
	// memoLinks are whole answers of Links by port, valid while gen is
	// linksGen (a resync without RDMA netlink reads every port's links).
	memoLinks map[string][]configfs.Link
	linksGen  uint64
	pending   string    // why the next read must rescan ("": no need)
	lastIdent time.Time // when the top directories' identity was last checked

	fallback   bool
	lastRescan time.Time
	stats      Stats

	closed bool

	// Test hooks.
	addWatchHook  func(path string) error // fails inotify_add_watch
	overflowNext  bool                    // the next drain acts as IN_Q_OVERFLOW
	discardEvents bool                    // drain reads events and ignores them (configfs without events)
	noIdentCheck  bool                    // skip the per-read identity check
}

// memo is one whole answer and the generation it was read at.
type memo[T any] struct {
	v   T
	gen uint64
	ok  bool
}

// memoised answers read() from the memo when nothing was invalidated
// since it was stored, else calls it and keeps its answer when every read
// behind it came from (and stayed in) the cache. Callers get a copy of the
// slice: the engine may sort or append.
func memoised[E any](m *Model, mo *memo[[]E], read func(*configfs.FS) ([]E, error)) ([]E, error) {
	f := m.prepare()
	if f == m.cfs && mo.ok && mo.gen == m.gen {
		m.stats.MemoHits++
		return slices.Clone(mo.v), nil
	}
	gen, unc := m.gen, m.uncached
	v, err := read(f)
	mo.ok = false
	if err == nil && f == m.cfs && gen == m.gen && unc == m.uncached {
		mo.v, mo.gen, mo.ok = slices.Clone(v), gen, true
	}
	return v, err
}

// ident is a directory's identity: (dev, inode), or absent.
type ident struct {
	dev, ino uint64
	ok       bool
}

// New watches the tree of fsys and reads it whole. Close releases the
// inotify descriptor.
func New(fsys *configfs.FS, opts Options) (*Model, error) {
	if opts.RescanEvery == 0 {
		opts.RescanEvery = 10 * time.Minute
	}
	if opts.IdentEvery == 0 {
		opts.IdentEvery = 20 * time.Millisecond
	}
	if opts.BigDir <= 0 {
		opts.BigDir = 8
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("configfs watch: inotify_init1: %w", err)
	}
	root := fsys.Root()
	m := &Model{
		fs: fsys, ops: fsys.Ops(), root: root, log: opts.Logger, opts: opts,
		fd: fd, buf: make([]byte, 64<<10),
	}
	m.cfs = configfs.NewWithOps(root, cacheOps{m})
	m.top = map[string]bool{}
	for _, d := range m.topDirs() {
		m.top[d] = true
		if rel := strings.Trim(d[len(root):], "/"); rel != "" {
			m.topDepth = max(m.topDepth, strings.Count(rel, "/")+1)
		}
	}
	m.byWD = map[int32]*node{}
	m.mu.Lock()
	m.rescan(false, "start")
	m.mu.Unlock()
	return m, nil
}

// topDirs are the root and the directories the nvmet and LIO trees hang
// from; the identity of the last four is checked at every read.
func (m *Model) topDirs() []string {
	return []string{
		m.root, filepath.Join(m.root, "nvmet"), filepath.Join(m.root, "target"),
		filepath.Join(m.root, "nvmet", "ports"), filepath.Join(m.root, "nvmet", "subsystems"),
		filepath.Join(m.root, "target", "iscsi"),
	}
}

// Close releases the inotify descriptor; a second Close does nothing.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return unix.Close(m.fd)
}

// Invalidate makes the next read a full rescan (a module was loaded or
// unloaded: nvmet, nvmet_rdma, iscsi_target_mod, target_core_mod).
func (m *Model) Invalidate() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.want("invalidated by the caller")
}

// SetRescanEvery changes the period of the trusted rescan (a reload);
// 0 or less: never.
func (m *Model) SetRescanEvery(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d <= 0 {
		d = -1
	}
	m.opts.RescanEvery = d
}

// Rescan reads configfs whole now and compares it with the model: every
// difference is logged and counted as a disagreement (a bug), and the
// rescan wins.
func (m *Model) Rescan() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drain()
	why := "requested"
	if m.pending != "" {
		why += "; " + m.pending
	}
	m.rescan(m.pending == "", why)
}

// Stats returns the counters.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Watches = len(m.byWD)
	return s
}

// want asks for a full rescan at the next read (the model cannot trust
// itself: no comparison is made).
func (m *Model) want(why string) {
	if m.pending == "" {
		m.pending = why
	}
}

// prepare brings the model up to date before a read and returns the tree
// to read: the cached one, or the real one when watches ran out.
func (m *Model) prepare() *configfs.FS {
	m.drain()
	if m.pending == "" && !m.noIdentCheck && (m.opts.IdentEvery < 0 || time.Since(m.lastIdent) >= m.opts.IdentEvery) {
		m.lastIdent = time.Now()
		if d := m.identChanged(); d != "" {
			m.want(d + " is not the directory watched (module loaded or unloaded, configfs mounted or unmounted)")
		}
	}
	switch {
	case m.pending != "":
		m.rescan(false, m.pending)
	case m.opts.RescanEvery > 0 && m.opts.Now().Sub(m.lastRescan) >= m.opts.RescanEvery:
		m.rescan(true, "periodic")
	}
	if m.fallback {
		return m.fs
	}
	return m.cfs
}

// identOf reads a directory's identity through the real Ops.
func (m *Model) identOf(path string) ident {
	st, err := m.ops.Lstat(path)
	if err != nil || !st.IsDir() {
		return ident{}
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return ident{dev: uint64(s.Dev), ino: s.Ino, ok: true}
	}
	return ident{ok: true}
}

// identChanged names the first top directory that appeared, vanished or
// was replaced since the last rescan ("" when none): events do not report
// a module's tree appearing or vanishing, nor configfs being (un)mounted.
func (m *Model) identChanged() string {
	for _, d := range m.identDirs() {
		if m.identOf(d) != m.idents[d] {
			return d
		}
	}
	return ""
}

func (m *Model) identDirs() []string { return m.topDirs()[2:] }

// --- rebind.Tree ---

// Ports is configfs.FS.Ports, from the model.
func (m *Model) Ports() ([]configfs.Port, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return memoised(m, &m.memoPorts, (*configfs.FS).Ports)
}

// Generation is a token of what the model answers: two calls that return
// the same token (ok) saw no change of the tree in between — no event, no
// rebuild, no write — and no read in between was answered by configfs
// without being kept (an error, an unwatched directory), so every read
// made between them gave the answer a read now would give. ok is false
// while reads go to configfs (fallback). It drains pending events first.
func (m *Model) Generation() (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.prepare() != m.cfs {
		return 0, false
	}
	return m.gen + m.uncached, true // both only grow: the sum moves when either does
}

// Links is configfs.FS.Links, from the model.
func (m *Model) Links(portID string) ([]configfs.Link, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.prepare()
	if f != m.cfs {
		return f.Links(portID)
	}
	if m.linksGen != m.gen {
		m.memoLinks, m.linksGen = nil, m.gen
	}
	if v, ok := m.memoLinks[portID]; ok {
		m.stats.MemoHits++
		return slices.Clone(v), nil
	}
	gen, unc := m.gen, m.uncached
	v, err := f.Links(portID)
	for i, l := range v {
		// FS's NQN is the end of the link's resolved path: keep a string
		// of its own, most often the link's name.
		switch {
		case l.NQN == l.Name:
			v[i].NQN = l.Name
		case l.NQN == m.lastNQN:
			v[i].NQN = m.lastNQN
		default:
			m.lastNQN = strings.Clone(l.NQN)
			v[i].NQN = m.lastNQN
		}
	}
	if err == nil && gen == m.gen && unc == m.uncached {
		if m.memoLinks == nil {
			m.memoLinks = map[string][]configfs.Link{}
		}
		m.memoLinks[portID] = slices.Clone(v)
	}
	return v, err
}

// Port is configfs.FS.Port, from the model.
func (m *Model) Port(portID string) (configfs.Port, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.prepare().Port(portID)
}

// Portals is configfs.FS.Portals, from the model.
func (m *Model) Portals() ([]configfs.Portal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return memoised(m, &m.memoPortals, (*configfs.FS).Portals)
}

// Portal is configfs.FS.Portal, from the model.
func (m *Model) Portal(id string) (configfs.Portal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.prepare().Portal(id)
}

// Subsystems is configfs.FS.Subsystems, from the model.
func (m *Model) Subsystems() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return memoised(m, &m.memoSubsys, (*configfs.FS).Subsystems)
}
