// Package watch keeps an in-memory model of the parts of configfs the
// daemon reads, current by inotify, so that a read after an event costs
// the objects that changed, not the whole tree.
//
// # Design
//
// Model answers the engine's Tree (Ports, Links, Portals, Portal,
// Subsystems; Unlink, Relink, SetISER) by running configfs.FS's own read
// code over a caching configfs.Ops: the answers are FS's by construction
// (same validation, ordering and errors); only where the bytes come from
// differs. The cache holds, per path under the root, the results of the
// four read calls FS makes (ReadDirNames, ReadAttrs, Lstat, Readlink),
// in a tree of small nodes (80 bytes: names, not paths; a listing,
// attribute values or link target in one slice, shared between nodes
// when equal; of an Lstat only the mode, all FS reads of it): the model
// of 4096 ports and 4096 portals holds 3.7 MB (BenchmarkModelRead's
// model-heap-B; the whole answers memoised add about 1.3 MB).
// A directory's listing and attributes are cached only while the
// directory is watched, an entry's Lstat and Readlink only while its
// parent is; the watch is added before the read, so a change is either in
// what was read or an event still to come. Results that are neither a
// success nor "does not exist" are never cached.
//
// Every read first drains the inotify descriptor without blocking (the
// kernel queues an event inside the writing system call, so every write
// that completed is seen) and turns each event into invalidations: an
// entry created, removed or renamed (mkdir, rmdir, ln -s, rm) drops the
// directory's listing and attributes and everything known under that
// name; an attribute written (IN_MODIFY on its directory) drops the
// directory's attributes; a directory going away (IN_DELETE_SELF,
// IN_MOVE_SELF, or IN_IGNORED for a watch the model did not remove)
// drops its subtree. The model's own writes invalidate directly as well.
// Only the dropped entries are read again. Events are read only under the
// model's mutex, at read time: the model has no goroutine. (It does not
// tell anyone about an admin's change: the daemon reconciles on kernel
// events and its resync, as it did before the model.)
//
// # Generation
//
// Generation is a token that moves at every invalidation (an event, the
// model's own write, a rescan) and at every read answered by configfs
// without being kept: the same token twice means every read in between
// answered what a read now would; it has none (ok false) while reads go
// to configfs (fallback). The engine carries an observation whole while
// the token has not moved (rebind: Generational).
//
// # What is watched
//
// The root, nvmet, target; nvmet/ports, every port and its subsystems
// directory; nvmet/subsystems; target/iscsi, every target, TPG, np
// directory and np. That is 2 watches per nvmet port and, for a portal,
// 1 for its np plus 1 per np directory, TPG and target it does not share
// with another portal: 4 for a portal alone in its target. 4096 ports and
// 4096 single-portal targets take 24,582 watches (measured). The default
// fs.inotify.max_user_watches on small machines is 8192 (newer kernels
// scale it with memory); it is per user, shared with every other inotify
// user of root. When a watch cannot be added (ENOSPC, logged with the
// sysctl's name) the model falls back to full reads (configfs.FS) until a
// rescan can watch everything again.
//
// # Rescans
//
// A full rescan forgets the cache, reads the tree whole (every port's
// links included) and watches it anew, removing watches left over. It
// runs at New; after IN_Q_OVERFLOW, IN_UNMOUNT, a failed read of the
// events, or the loss of a top-level directory (root, nvmet, target,
// nvmet/ports, nvmet/subsystems, target/iscsi); when a read finds that
// nvmet/ports, nvmet/subsystems, target or target/iscsi is not the
// directory (device, inode) it watched (checked by the first read after
// Options.IdentEvery, 20 ms: a heal's burst of reads shares one check) —
// configfs reports no event when a module's tree appears or vanishes, nor
// when it is (un)mounted; after
// Invalidate (the caller's module uevents); and at the first read
// RescanEvery (10 minutes) after the last one, or on Rescan. The last two
// are trusted, and check before they rebuild: the tree is read whole
// around the model (configfs.FS over the same Ops, no cache, no watch)
// and compared, object by object, with what the model answers. When every
// object agrees the model is kept as it is — cache, watches and
// Generation — so an idle daemon's periodic rescan costs one read of the
// tree and nothing after it. Every difference is logged ("configfs model
// disagreed with a rescan") and counted in Stats.Disagreements — a bug,
// since no event was lost — and the model is rebuilt: the rescan wins.
//
// # Limits
//
// The model trusts what configfs reports through inotify (KERNEL.md,
// "Watching configfs"): the kernel changes no link and no iser by itself.
// Changes made other than through the file system are seen only by the
// identity check, Invalidate or a rescan.
package watch
