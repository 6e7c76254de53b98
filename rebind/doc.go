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
// Engine.Reconcile is one round. An event (a device reset, an address, a
// listener gone: Poke) takes this path, and so does every other round:
//
//   - observe (observe.go, inputs.go, carry.go, endpoints.go): read the
//     inputs, each declared once in inputs.go (the RDMA tables: devices,
//     addresses, cm_id listeners; the TCP sockets in LISTEN; the journal;
//     the saved configs; configfs's root), then configfs. When every
//     input reads as the baseline's (the last round's observation) and
//     the configfs model's Generation has not moved, the baseline's
//     objects and verdicts are this observation's (carry.go: judging them
//     again would give the same). Otherwise the observation is fresh: the
//     tables indexed (rdma.Index), each endpoint judged once (judge.go: a
//     Verdict — listening, dead, stranded, unknown; TCP ports from the TCP
//     sockets), configfs read, the links of ports only where the verdict
//     needs them. An event changes the tables, so its round observes
//     afresh.
//   - select (select.go): the endpoints this round must decide — those
//     whose objects or verdict differ from the baseline's, those named by
//     the journal or a manual rebind, and those in the wake-up queue
//     (wakeups.go); an input whose change can move every endpoint (its
//     declaration says so: an unreadable table, the saved configs) selects
//     all, and so does a reload.
//   - plan (plan.go, plan_nvmet.go, plan_lio.go, policy.go): pure. Each
//     selected endpoint's state, status and heal; policy.go gates the heal
//     (give-up, graces, pinning, backoff: one pipeline) and says when to
//     look again. decide writes the loop's one map of decisions in place
//     (the others keep theirs) and the wake-up queue: an endpoint whose
//     decision depends on the clock is added with its time, the others
//     forgotten. Plan (everything) and a selection's plan are the same
//     function on different sets.
//   - apply (apply.go): the only writer of configfs and the journal, each
//     step after its precondition (steps.go: Step.Pre, data that apply
//     checks and `plan` describes). An iser write reads its precondition
//     on the file it writes (Tree.SwapISERs: a run of zeros is one call,
//     one open of the configfs root); the journal batch before it
//     takes the plan's reading of iser as its precondition while the
//     configfs model's Generation has not moved since the observation
//     (Observed.unchanged), and reads it again otherwise; after the first iser=1, a
//     shared portal's other sharers are written side by side
//     (attachISERs, Options.ISERWriters); a port's unlinks are one call
//     (Tree.UnlinkAll), and so are its links (Tree.RelinkAll), each still
//     counted, judged and fault-pointed as it goes. The journal batch is
//     synced (Store.Sync) once the heal's binding write is made, and at
//     the end of apply: the writes before it wait for no disk (state's
//     "Visible, then durable").
//   - verify (verify.go): pure, over the verdicts of an observation made
//     after the writes, and what the plan of that observation expects
//     there (expected); the endpoints it changed are selected and planned
//     again.
//   - learn (memory.go): pure updates of Memory from the outcomes and the
//     plan; the loop is memory's one writer.
//   - publish (snapshot.go): the Snapshot observers read (status, metrics,
//     the control socket), swapped once per round; its next look is the
//     wake-up queue's earliest time (or now, when a heal is due that the
//     round did not run).
//
// Options.Exhaustive makes every round a fresh observation reading every
// link, every endpoint decided and learnt: TestEngineEqualsTheExhaustiveRound
// holds the normal round to it through random worlds, and
// tests/mutants.sh breaks each shortcut the normal round keeps (the carry,
// the selection, the links not read) to show the test catches it.
//
// Requests from other goroutines — a config swap (SetConfig), a forced
// retry (Retry, Rebind), an event (Poke) — are taken by the next round.
// Run (loop.go) runs rounds on events, at the resync interval, and when the
// last plan asks for a retry. Without a daemon, Settle (a trigger's) runs
// one event's rounds the same way, at the plan's next looks, for a bounded
// time.
package rebind
