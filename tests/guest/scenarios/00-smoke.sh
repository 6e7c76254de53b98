# smoke: the kernel facts nvmet-rebind relies on, without the daemon.
# An nvmet port and a LIO iSER portal bound to 192.0.2.1 listen;
# `rdma link delete` + `add` of rxe0 leaves both dead while configfs still
# looks configured; a manual unlink/relink (iser 0/1) heals them.
NQN=nqn.2024-01.io.e2e:smoke
IQN=iqn.2024-01.io.e2e:smoke
A=192.0.2.1

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
must lio_target $IQN
must lio_portal $IQN $A 3260

listening nvmet_rdma $A 4420 rxe0 || fail "nvmet port 1 not listening after the link"
listening ib_isert $A 3260 rxe0 || fail "iSER portal not listening after iser=1"
discover $A 4420 $NQN || fail "nvme discover failed on a healthy port"
log "both listen; discover works"

must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "nvmet listener still there after rdma link delete"
listening ib_isert $A 3260 && fail "iSER listener still there after rdma link delete"
nvmet_linked 1 $NQN || fail "the port's subsystem link vanished with the device"
[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "iser no longer reads 1 after device removal"
log "device gone: listeners gone, configfs unchanged"

t0=$(now)
must rxe_add rxe0 veth0
if ms=$(wait_listen nvmet_rdma $A 4420 3); then
	fail "the kernel re-listened by itself after ${ms} ms (it is not expected to)"
fi
listening ib_isert $A 3260 && fail "the kernel re-listened the iSER portal by itself"
discover $A 4420 && fail "discover worked on a dead port"
log "device back: still dead after 3 s (as the kernel does)"

t0=$(now)
must nvmet_unlink 1 $NQN
must nvmet_link 1 $NQN
must lio_set_iser $IQN $A 3260 0
must lio_set_iser $IQN $A 3260 1
ms=$(wait_listen nvmet_rdma $A 4420 5 "$t0") || fail "nvmet port not listening after manual relink"
ms2=$(wait_listen ib_isert $A 3260 5 "$t0") || fail "iSER portal not listening after iser 0/1"
metric "manual_relink_nvmet_ms=$ms"
metric "manual_relink_lio_ms=$ms2"
discover $A 4420 $NQN || fail "discover failed after the manual relink"
pass "listeners die with the device, stay dead when it returns, a manual relink heals them (${ms} ms)"
