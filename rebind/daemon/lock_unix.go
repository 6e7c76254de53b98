//go:build unix

package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/owndir"
)

// Lock takes an exclusive flock on <state-dir>/lock so that two
// reconcilers never write at once. The state directory is created (0700)
// when missing and refused when others can write it (owndir.Ensure); the
// lock file is never reached through a symlink (O_NOFOLLOW: a symlink
// there is an error, and its target is not created).
func Lock(dir string) (func(), error) {
	if err := owndir.Ensure(dir); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("state dir %s: lock %s is a symlink; not followed: remove it (the daemon creates a plain file there)", dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("state dir %s: lock: %w", dir, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file (%v): remove it", st.Mode().Type())
		}
		return nil, fmt.Errorf("state dir %s: lock %s: %w", dir, path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("state dir %s is locked by another nvmet-rebind (%w); stop it first", dir, err)
	}
	return func() { f.Close() }, nil
}

// AwaitLock takes Lock(dir), waiting up to wait while another process
// holds it: a trigger or a rebind reconciles under the lock for a few
// seconds. Every 100 ms it asks stop first; an error from stop ends the
// wait with that error (a daemon answering, whose lock never frees). After
// wait, or when ctx ends, the error is Lock's (errors.Is EWOULDBLOCK);
// any other failure of Lock returns at once.
func AwaitLock(ctx context.Context, dir string, wait time.Duration, stop func() error) (func(), error) {
	deadline := time.Now().Add(wait)
	for {
		unlock, err := Lock(dir)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) || !time.Now().Before(deadline) {
			return unlock, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
		if err := stop(); err != nil {
			return nil, err
		}
	}
}
