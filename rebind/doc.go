// Package rebind is the engine of nvmet-rebind: it heals the kernel
// listeners (endpoints) of nvmet RDMA ports and LIO iSER portals that a
// device reset destroyed, by redoing the configfs writes that bind them.
//
// What dies on a device reset is a kernel listener, an endpoint: (owner,
// address, port). Behind it are the configfs objects that hold it: one nvmet
// port, or every LIO TPG portal (of every target) with that address:port and
// iser=1, which share one kernel iSER listener. The engine heals endpoints.
//
// Desired state is configfs as the admin left it (read at every round)
// plus the intent journal. The kernel never removes links or clears iser on
// device removal, so any such change is the admin's and is never undone.
//
// # A round
//
// Engine.Reconcile is one round, in this order (each step a file):
//
//   - observe (observe.go, carry.go, endpoints.go: the endpoint index):
//     read the kernel's tables (RDMA devices, GID tables, cm_ids,
//     addresses, TCP sockets in LISTEN: rdma.Live.Read gives the devices
//     and the addresses of one rtnetlink reading), the journal and
//     the saved configs; when all of that reads as the baseline's did and
//     the configfs model's Generation has not moved, the baseline's objects
//     and verdicts are this observation's (nothing could judge otherwise);
//     when it moved but the model names the only objects that may have
//     changed (watch.Model.Changes: a heal's own writes, an admin's link
//     or iser), those are read again into the baseline's (carry.go:
//     edited); when the kernel's tables changed too (an event: a reset,
//     an address, a listener), the baseline's objects, and its verdicts
//     but for the endpoints the tables' delta touches (rdma.Index.Since),
//     judged again (carry.go: rejudge; the verdicts patched over the
//     baseline's endpoint list, not a copy of it); else index the tables
//     (rdma.Index), judge each endpoint once
//     (judge.go: a Verdict — listening, dead, stranded, unknown; TCP ports
//     from the TCP sockets), and read configfs, the links of ports only
//     where the verdict needs them.
//   - select (select.go): the endpoints this round must decide — those whose
//     objects or verdict changed since the last round (the Baseline), named
//     by the journal or a manual rebind, or decided by the clock; an input
//     every endpoint reads selects all.
//   - plan (plan.go, plan_nvmet.go, plan_lio.go, policy.go, decisions.go):
//     pure. Each selected endpoint's state, status and heal; policy.go
//     gates the heal (give-up, graces, pinning, backoff) and says when to
//     look again. The others keep their last decision (overlaid:
//     decisions.go): Plan (everything) and a selection's plan are the
//     same function on different sets.
//   - apply (apply.go): the only writer of configfs and the journal, each
//     step after its precondition (steps.go: Step.Pre, data that apply
//     checks and `plan` describes).
//   - verify (verify.go): pure, over the verdicts of a fresh observation.
//   - learn (memory.go): pure updates of Memory from the outcomes and the
//     plan; the loop is memory's one writer. Learn is idempotent, so a
//     plan that carries the very decisions memory last learnt (a round
//     that decided nothing) is not learnt again.
//   - publish (snapshot.go): the Snapshot observers read (status, metrics,
//     the control socket), swapped once per round.
//
// Requests from other goroutines — a config swap (SetConfig), a forced
// retry (Retry, Rebind), an event (Poke) — are taken by the next round.
// Run (loop.go) runs rounds on events, at the resync interval, and when the
// last plan asks for a retry.
package rebind
