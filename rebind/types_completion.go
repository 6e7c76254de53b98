package rebind

import (
	"context"
	"time"
)

// Completer makes the objects a saved config declares and configfs lacks:
// hosts, subsystems, namespaces, ports, ANA groups, referrals
// (rebind/complete). Links of ports and iSER portals stay the endpoints'
// (plan_nvmet.go, plan_lio.go): they wait for an address and a device,
// which endpoints are judged by. The loop calls it first in every round.
type Completer interface {
	Complete(ctx context.Context, in CompletionInput) Completion
}

// CompletionInput is what the loop tells the completer.
type CompletionInput struct {
	Config Config
	// Reload: read the saved config again (the first round, a reload):
	// never behind the admin's back.
	Reload bool
	// Open: within the boot window, objects may be made. Outside it only
	// an object the completer was making when it stopped is finished.
	Open   bool
	DryRun bool // describe what would be made, write nothing
	Now    time.Time
}

// Completion is what one call found and did.
type Completion struct {
	Source string
	// Missing are the declared objects configfs lacks that the admin did
	// not remove, with what each waits for.
	Missing []Pending
	// Made are the objects made by this call; Planned what a dry run
	// would make, as the writes (mkdir, echo, ln -s).
	Made, Planned []string
	// Differs are objects that exist with attributes other than the
	// file's: reported, never changed.
	Differs []string
	// Err is the saved config's (unreadable, bad entries) and the
	// refusals of this call.
	Err error
	// Again asks for another call after this long (an object waits for a
	// device path that udev may be about to make); 0: at the next event.
	Again time.Duration
}

// Pending is one declared object still missing and what it waits for.
type Pending struct {
	Object  string // its path under nvmet/ (…#enable: the namespace's enable)
	Waiting string
}
