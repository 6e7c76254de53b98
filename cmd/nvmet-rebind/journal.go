package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/journal"
)

// journalHandler sends every record to the systemd journal as one entry
// of its own (SYSLOG_IDENTIFIER=nvmet-rebind, PRIORITY from the level),
// its MESSAGE the line the text handler prints, without the time. It is
// for `trigger` run by udev: udevd keeps a RUN program's stderr only at
// debug level, so a heal the trigger made alone would be logged nowhere
// an admin looks.
type journalHandler struct {
	h   slog.Handler
	mu  *sync.Mutex
	buf *bytes.Buffer
	cmd string // NVMET_REBIND_COMMAND
	// send is journal.Send (tests record instead).
	send func(msg string, p journal.Priority, vars map[string]string) error
}

func newJournalHandler(lvl slog.Leveler, cmd string) *journalHandler {
	buf := new(bytes.Buffer)
	h := slog.NewTextHandler(buf, &slog.HandlerOptions{Level: lvl, ReplaceAttr: dropTime})
	return &journalHandler{h: h, mu: new(sync.Mutex), buf: buf, cmd: cmd, send: journal.Send}
}

// dropTime leaves the time out (the journal keeps its own).
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func (j *journalHandler) Enabled(ctx context.Context, l slog.Level) bool { return j.h.Enabled(ctx, l) }

func (j *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf.Reset()
	if err := j.h.Handle(ctx, r); err != nil {
		return err
	}
	return j.send(strings.TrimSuffix(j.buf.String(), "\n"), priority(r.Level),
		map[string]string{"SYSLOG_IDENTIFIER": "nvmet-rebind", "NVMET_REBIND_COMMAND": j.cmd})
}

func (j *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *j
	c.h = j.h.WithAttrs(as)
	return &c
}

func (j *journalHandler) WithGroup(name string) slog.Handler {
	c := *j
	c.h = j.h.WithGroup(name)
	return &c
}

// priority is syslog's for a level.
func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	}
	return journal.PriDebug
}
