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

// Completion reads the completion record; nil when there is none. It is
// read bounded, never through a symlink, and only if it is a regular file.
func (s *Store) Completion() ([]byte, error) {
	b, err := bounded.ReadFile(s.completionFile(), maxCompletionBytes, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if be, ok := errors.AsType[*bounded.Error](err); ok {
		be.Fix = "remove it; the daemon writes a new one"
		return nil, fmt.Errorf("completion record %w", be)
	}
	if err != nil {
		return nil, fmt.Errorf("completion record %s: %w", s.completionFile(), err)
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
