package rebind_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/configfstest"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// A heal whose relink of one subsystem fails (not a refused bind: the port
// binds, that one link does not) makes every other link, keeps the journal
// for the one it could not, reports it and retries only that: the port
// never ends with fewer links than the kernel lets it have.
func TestOneRelinkFailingLeavesTheOthers(t *testing.T) {
	w := newWorld(t)
	e := w.engine()
	w.reconcile(e)
	w.reset()
	bad := true
	w.k.Fault = func(_ int, wr configfstest.Write) error {
		if bad && wr.Op == "symlink" && strings.HasSuffix(wr.Path, "/"+nqnA) {
			return syscall.EINVAL
		}
		return nil
	}
	items := w.reconcile(e)
	if got := w.links("1"); len(got) != 1 || got[0] != nqnB {
		t.Fatalf("after the heal: links %v, want %s made despite %s failing", got, nqnB, nqnA)
	}
	if !w.k.Listening("nvmet_rdma", "1") {
		t.Fatal("port 1 not listening with the links it could make")
	}
	if n := len(journalFiles(t, w.state+"/journal")); n == 0 {
		t.Fatal("the journal of the failed link is gone: nothing would retry it")
	}
	it := item(items, "1")
	if !strings.Contains(it.Reason, "1 subsystem link(s) to restore from the journal") || it.RetryAt.IsZero() {
		t.Errorf("status %q (retry %v): want the one link to restore and a retry", it.Reason, it.RetryAt)
	}
	if r, _ := e.Snapshot().Last(rebind.Key{Kind: rebind.KindNvmet, ID: "1"}); r.Result != rebind.ResultError || r.Err == nil {
		t.Errorf("last result %v (%v), want an error", r.Result, r.Err)
	}
	// The retry makes only the missing link: nothing is unlinked again.
	bad = false
	w.clk.advance(10 * time.Second)
	w.k.ResetLog()
	w.reconcile(e)
	if got := w.links("1"); len(got) != 2 {
		t.Fatalf("after the retry: links %v, want both", got)
	}
	for _, l := range w.k.LogStrings() {
		if strings.HasPrefix(l, "remove ") {
			t.Errorf("the retry unlinked: %s", l)
		}
	}
	if n := len(journalFiles(t, w.state+"/journal")); n != 0 {
		t.Errorf("%d journal files left after every link is back", n)
	}
}
