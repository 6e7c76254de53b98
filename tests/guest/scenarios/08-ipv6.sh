# ipv6: an nvmet port on [2001:db8::1]:4420 and a LIO iSER portal
# [2001:db8::1]:3260 (nodad); rxe0 delete + add → both healed, discover
# over IPv6 works.
NQN=nqn.2024-01.io.e2e:ipv6
IQN=iqn.2024-01.io.e2e:ipv6
A=2001:db8::1
need_daemon

must veth veth0 veth1
must addr veth0 $A/64
must rxe_add rxe0 veth0
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
must lio_target $IQN
must lio_portal $IQN $A 3260
listening nvmet_rdma $A 4420 || fail "IPv6 port does not listen at setup"
listening ib_isert $A 3260 || fail "IPv6 portal does not listen at setup"
discover $A 4420 $NQN || fail "IPv6 discover fails at setup"
write_config
daemon_start || fail "daemon did not start"

must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
sleep 1
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "IPv6 port not listening 20 s after rdma link add"
ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "IPv6 portal not listening 20 s after rdma link add"
metric "heal_ms_nvmet=$ms"
metric "heal_ms_lio=$ms2"
discover $A 4420 $NQN || fail "IPv6 discover fails after the heal"
daemon_stop
pass "IPv6 port and portal healed (nvmet ${ms} ms, lio ${ms2} ms)"
