package state

// SetFault sets the fault hook of the journal's file operations (see
// fault) until restore is called.
func SetFault(f func(op, path string) error) (restore func()) {
	old := fault
	fault = f
	return func() { fault = old }
}
