# no-watch: `run --no-watch` (configfs read whole at every observation, the
# fallback to the inotify model): an nvmet port and an iSER portal are
# healed after a reset, exactly as with the model.
NQN=nqn.2024-01.io.e2e:nowatch
IQN=iqn.2024-01.io.e2e:nowatch
A=192.0.2.1
need_daemon

target_pair $A $NQN $IQN
listening nvmet_rdma $A 4420 rxe0 || fail "port 1 does not listen at setup"
listening ib_isert $A 3260 rxe0 || fail "the portal does not listen at setup"
write_config
DAEMON_ARGS=--no-watch daemon_start || fail "daemon did not start"
grep -q 'configfs_model=false' "$W/daemon.log" || fail "the daemon does not say it reads configfs whole: $(grep starting "$W/daemon.log")"
must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
sleep 1
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "port 1 not listening 20 s after rdma link add"
ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "portal not listening 20 s after rdma link add"
discover $A 4420 $NQN || fail "nvme discover fails after the heal"
daemon_alive || fail "the daemon died"
daemon_stop
metric "heal_ms=$ms"
metric "heal_lio_ms=$ms2"
pass "--no-watch: nvmet ${ms} ms, iSER ${ms2} ms after rdma link add"
