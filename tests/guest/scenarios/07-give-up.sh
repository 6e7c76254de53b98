# give-up: give_up_after = "5s"; the device returns after 10 s → the daemon
# does not heal it and `status --json` says it gave up; `nvmet-rebind reload`
# restarts the window and heals it.
NQN=nqn.2024-01.io.e2e:giveup
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
listening nvmet_rdma $A 4420 || fail "port 1 does not listen at setup"
write_config 5s
daemon_start || fail "daemon did not start"

must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
log "waiting 10 s with the device away"
sleep 10
must rxe_add rxe0 veth0
if ms=$(wait_listen nvmet_rdma $A 4420 6); then
	fail "healed after ${ms} ms although the give-up window (5 s) was over"
fi
line=$(status_of nvmet 1) || fail "status --json has no nvmet port 1"
log "status: $line"
echo "$line" | grep -qi 'listening=false' || fail "status does not say listening=false: $line"
echo "$line" | grep -qiE 'reason="[^"]*(gave up|give up|given up|giving up)' || fail "status reason does not say it gave up: $line"
check_rc
rc=$?
[ $rc = 2 ] || fail "check exits $rc while the port is dead and given up (want 2, CRITICAL)"
t0=$(now)
must rb reload
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "not healed 20 s after reload"
metric "heal_after_reload_ms=$ms"
discover $A 4420 $NQN || fail "discover fails after the reload"
check_rc || fail "check exits $? after the heal (want 0)"
daemon_stop
pass "given up after 5 s, not healed; reload healed it in ${ms} ms"
