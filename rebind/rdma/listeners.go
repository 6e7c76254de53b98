package rdma

// SameListener tells whether two LISTEN entries are the same to a judge
// of them: device, port, address and owner (not the cm_id's number or
// the process).
func SameListener(a, b CMID) bool {
	return a.DevIndex == b.DevIndex && a.DevName == b.DevName && a.Port == b.Port && a.Src == b.Src && a.KernName == b.KernName
}

// SameListeners tells whether two cm_id tables hold the same LISTEN
// entries, in order, as a judge reads them (SameListener): the
// identifiers of host connections (a target's queues come and go) and the
// restrack numbers do not decide a verdict. It is the equality of the
// engine's cm_id input.
func SameListeners(a, b []CMID) bool {
	i, j := nextListening(a, 0), nextListening(b, 0)
	for ; i < len(a) && j < len(b); i, j = nextListening(a, i+1), nextListening(b, j+1) {
		if !SameListener(a[i], b[j]) {
			return false
		}
	}
	return i == len(a) && j == len(b)
}

// nextListening is the index of the first LISTEN entry of s from i on.
func nextListening(s []CMID, i int) int {
	for i < len(s) && !s[i].Listening() {
		i++
	}
	return i
}
