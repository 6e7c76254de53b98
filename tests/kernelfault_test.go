package tests

import "testing"

// TestKernelFault: the kernel's reports that make a failed scenario run
// once more (retryKernelHangs) are found in its log, and nothing else is.
func TestKernelFault(t *testing.T) {
	for _, tt := range []struct {
		lines []string
		want  string
	}{
		{[]string{"  [1.0] flap 18", "[  140.378861] BUG: kernel NULL pointer dereference, address: 00000000000000d0", "[  140.381071] Oops: Oops: 0000 [#1] SMP NOPTI"},
			"[  140.378861] BUG: kernel NULL pointer dereference, address: 00000000000000d0"},
		{[]string{"    [  363.1] INFO: task rdma:1234 blocked for more than 120 seconds."}, "[  363.1] INFO: task rdma:1234 blocked for more than 120 seconds."},
		{[]string{"[  10.0] general protection fault, probably for non-canonical address"}, "[  10.0] general protection fault, probably for non-canonical address"},
		{[]string{"  FAILED: listener not back", "[  5.0] WARNING: CPU: 0 PID: 1 at x.c:1", "---[ end trace 0000000000000000 ]---"}, ""},
		{nil, ""},
	} {
		if got := kernelFault(tt.lines); got != tt.want {
			t.Errorf("kernelFault(%q) = %q, want %q", tt.lines, got, tt.want)
		}
	}
}
