# bad-journal: a journal entry the kernel could never carry out — a link
# named bad/name (as a careless hand or a broken tool would leave it) —
# planted while the daemon is stopped, for a port with two linked
# subsystems; then a device reset and a start. The entry is checked against
# the kernel's naming rules before any write: it is quarantined with a log
# line naming it, and the port is healed with both of its links (before:
# the heal unlinked both, failed at the first relink, and the port was
# left with no links and no listener).
NQA=nqn.2024-01.io.e2e:bj-a
NQB=nqn.2024-01.io.e2e:bj-b
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
must nvmet_subsys $NQA /dev/nullb0
must nvmet_subsys $NQB /dev/nullb1
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQA
must nvmet_link 1 $NQB
listening nvmet_rdma $A 4420 || fail "port 1 does not listen at setup"
order0=$(links_order 1)
write_config
mkdir -p "$W/state/journal"
chmod 700 "$W/state" "$W/state/journal"
bad="$W/state/journal/batch-00000000000000000001.json"
cat >"$bad" <<JSON
{"version":1,"seq":1,"intents":[{"version":1,"kind":"nvmet","id":"1","address":"$A:4420","links":[{"name":"bad/name","nqn":"$NQA"},{"name":"$NQA","nqn":"$NQA"},{"name":"$NQB","nqn":"$NQB"}],"started":"2026-01-01T00:00:00Z"}]}
JSON
chmod 600 "$bad"
must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
must rxe_add rxe0 veth0
t0=$(now)
daemon_start || fail "daemon did not start"
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "port 1 not listening 20 s after the start (links: $(links_order 1))"
metric "bad_journal_heal_ms=$ms"
nvmet_linked 1 $NQA || fail "subsystem A not linked after the heal"
nvmet_linked 1 $NQB || fail "subsystem B not linked after the heal"
[ "$(links_order 1)" = "$order0" ] || fail "link order changed: '$order0' before, '$(links_order 1)' after"
[ -e "$bad.corrupt" ] || fail "the invalid entry was not quarantined ($(ls "$W/state/journal"))"
grep 'journal entry ignored' "$W/daemon.log" | grep -q 'bad/name' || fail "no log line names the invalid entry"
log "$(grep 'journal entry ignored' "$W/daemon.log" | head -n 1)"
discover $A 4420 $NQA || fail "discover fails after the heal"
daemon_stop
pass "an invalid journal entry (link bad/name) was quarantined and named in the log; port 1 healed with both links in ${ms} ms"
