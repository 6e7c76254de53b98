package state

// SetFault sets s's fault hook of the journal's file operations (see
// faultAt) until restore is called.
func SetFault(s *Store, f func(op, path string) error) (restore func()) {
	old := s.fault
	s.fault = f
	return func() { s.fault = old }
}
