package state

// Boot completion's record (completion.json): what the saved config
// declares that was seen in configfs this boot, and what is being made
// (rebind/complete owns its content; this file only keeps it durably).

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
)

func (s *Store) completionFile() string { return filepath.Join(s.dir, "completion.json") }

// maxCompletionBytes bounds completion.json: one line per declared object
// (a Cinder-sized file declares a few thousand).
const maxCompletionBytes = 64 << 20

// Completion reads the completion record; nil when there is none.
func (s *Store) Completion() ([]byte, error) {
	return s.readFile("completion record", s.completionFile(), maxCompletionBytes, "remove it; the daemon writes a new one")
}

// readFile reads one of the state directory's files (what names it in
// errors): nil, nil when it does not exist. It is read bounded, never
// through a symlink, and only if it is a regular file; one that is not
// (a FIFO, a symlink, a device) is an error saying fix, and the next
// write renames a regular file over it.
func (s *Store) readFile(what, path string, max int64, fix string) ([]byte, error) {
	b, err := bounded.ReadFile(path, max, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if be, ok := errors.AsType[*bounded.Error](err); ok {
		be.Fix = fix
		return nil, fmt.Errorf("%s %w", what, be)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return b, nil
}

// SaveCompletion replaces the completion record durably.
func (s *Store) SaveCompletion(b []byte) error {
	if err := s.writeFile(s.dir, s.completionFile(), b); err != nil {
		return fmt.Errorf("completion record %s: %w", s.completionFile(), err)
	}
	return nil
}
