package state

import (
	"fmt"
	"os"
)

// The second half of a journal write (package doc: "Visible, then
// durable"): PutAll renames its file into place, Sync makes it durable.

// Sync makes durable what PutAll wrote since the last Sync: the file
// fsynced, then the directory; then the files the batch left with no
// newest write of any key go (prune). On an error what is left to do
// stays, for the next Sync, PutAll or DeleteAll.
func (s *Store) Sync() error {
	if s.readOnly {
		return ErrReadOnly
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sync(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// sync is Sync under s.mu.
func (s *Store) sync() error {
	if s.unsynced == "" {
		return nil
	}
	if err := s.fsync(s.unsynced); err != nil {
		return err
	}
	if err := s.syncDir(s.journal); err != nil {
		return err
	}
	s.unsynced = ""
	ix, err := s.index()
	if err == nil {
		err = s.prune(ix, s.fresh)
	}
	if err != nil {
		s.ix = nil // what is on disk is not known: read it again
		return err
	}
	s.fresh = nil
	return nil
}

// fsync syncs the file at path (written by PutAll, renamed into place).
func (s *Store) fsync(path string) error {
	if err := s.faultAt("fsync", path); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
