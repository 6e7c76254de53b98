# crash-resume: the daemon crashes (fault point, exit 137 without cleanup)
# right after its first unlink of a rebind: port 1 (two subsystems) is left
# with one link gone. A restarted daemon (without the fault) finishes the
# job from its journal: both links back, LISTEN, discover. The same for an
# iSER portal crashing after writing iser=0.
NQA=nqn.2024-01.io.e2e:crash-a
NQB=nqn.2024-01.io.e2e:crash-b
IQN=iqn.2024-01.io.e2e:crash
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

# Part 1: nvmet, crash after the first unlink.
daemon_start NVMET_REBIND_FAULT=crash-after-unlink || fail "daemon did not start"
must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
must rxe_add rxe0 veth0
daemon_wait_exit 20 || fail "the daemon with the fault did not crash within 20 s"
[ "$DAEMON_RC" = 137 ] || fail "the daemon exited with $DAEMON_RC, not 137"
n=0
nvmet_linked 1 $NQA && n=$((n + 1))
nvmet_linked 1 $NQB && n=$((n + 1))
log "after the crash: $n of 2 links present"
[ $n -lt 2 ] || fail "both links still present after a crash after unlink"
t0=$(now)
daemon_start || fail "restarted daemon did not start"
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "port 1 not listening 20 s after the restart"
metric "nvmet_resume_ms=$ms"
nvmet_linked 1 $NQA || fail "subsystem A not linked after the restart"
nvmet_linked 1 $NQB || fail "subsystem B not linked after the restart"
# Relinked in the original order: configfs lists them as before.
[ "$(links_order 1)" = "$order0" ] || fail "link order changed: '$order0' before, '$(links_order 1)' after"
log "link order kept: $order0"
discover $A 4420 $NQA || fail "discover fails after the restart"
grep -q "subnqn: *$NQB\$" "$W/discover.out" || fail "discover does not list subsystem B"
daemon_stop

# Part 2: LIO, crash after iser=0.
must lio_target $IQN
must lio_portal $IQN $A 3260
listening ib_isert $A 3260 || fail "portal does not listen at setup"
daemon_start NVMET_REBIND_FAULT=crash-after-iser-0 || fail "daemon did not start (part 2)"
must rdma_del rxe0
wait_gone ib_isert $A 3260 5 || fail "iSER listener survived rdma link delete"
must rxe_add rxe0 veth0
daemon_wait_exit 20 || fail "the daemon with the iser fault did not crash within 20 s"
[ "$DAEMON_RC" = 137 ] || fail "part 2: the daemon exited with $DAEMON_RC, not 137"
log "after the crash: iser=$(lio_iser $IQN $A 3260)"
[ "$(lio_iser $IQN $A 3260)" = 0 ] || fail "iser reads $(lio_iser $IQN $A 3260) after a crash after iser=0"
t0=$(now)
daemon_start || fail "restarted daemon did not start (part 2)"
ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "portal not listening 20 s after the restart"
metric "lio_resume_ms=$ms2"
[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "iser does not read 1 after the restart"
listening nvmet_rdma $A 4420 || fail "port 1 lost its listener in part 2"
daemon_stop
pass "crash mid-rebind recovered from the journal (nvmet ${ms} ms, lio ${ms2} ms after restart)"
