package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

// Every record is one journal entry: the text handler's line without the
// time, the level as syslog's priority, the identifier and the command.
func TestJournalHandler(t *testing.T) {
	type entry struct {
		msg  string
		p    journal.Priority
		vars map[string]string
	}
	var got []entry
	h := newJournalHandler(slog.LevelInfo, "trigger")
	h.send = func(msg string, p journal.Priority, vars map[string]string) error {
		got = append(got, entry{msg, p, vars})
		return nil
	}
	log := slog.New(h).With("pid", 7)
	log.Debug("not sent")
	log.Info("listener restored", "listener", "nvmet port 1")
	log.Warn("rebind failed, will retry")
	log.Error("reconcile failed")
	if len(got) != 3 {
		t.Fatalf("%d entries, want 3 (debug is below the level): %+v", len(got), got)
	}
	if m := got[0].msg; strings.Contains(m, "time=") || !strings.Contains(m, `msg="listener restored"`) || !strings.Contains(m, `listener="nvmet port 1"`) || !strings.Contains(m, "pid=7") || strings.HasSuffix(m, "\n") {
		t.Errorf("message %q", m)
	}
	for i, p := range []journal.Priority{journal.PriInfo, journal.PriWarning, journal.PriErr} {
		if got[i].p != p {
			t.Errorf("entry %d priority %d, want %d", i, got[i].p, p)
		}
		if got[i].vars["SYSLOG_IDENTIFIER"] != "nvmet-rebind" || got[i].vars["NVMET_REBIND_COMMAND"] != "trigger" {
			t.Errorf("entry %d vars %v", i, got[i].vars)
		}
	}
}
