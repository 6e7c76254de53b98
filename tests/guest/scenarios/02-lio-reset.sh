# lio-reset: a LIO iSCSI portal with iser=1 (tpgt_1, fileio LUN) on a
# specific IPv4 address; rxe0 delete + add → the daemon restores the iSER
# LISTEN; iser still reads 1. Metric heal_ms.
IQN=iqn.2024-01.io.e2e:lio-reset
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
must lio_target $IQN
must lio_portal $IQN $A 3260
listening ib_isert $A 3260 rxe0 || fail "iSER portal does not listen at setup"
write_config
daemon_start || fail "daemon did not start"

must rdma_del rxe0
wait_gone ib_isert $A 3260 5 || fail "iSER listener survived rdma link delete"
sleep 1
# Nothing can be bound without a device: configfs should stay as the admin
# left it (a refused toggle during the removal leaves iser=0 until the device
# returns; the journal keeps the intent: reported, not failed).
[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "iser reads $(lio_iser $IQN $A 3260) during the outage, not 1 (the daemon toggled iser while the device was going away)"
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "iSER portal not listening 20 s after rdma link add"
metric "heal_ms=$ms"
[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "iser does not read 1 after the heal"
daemon_alive || fail "the daemon died"
daemon_stop
[ "$DAEMON_RC" = 0 ] || fail "daemon exit status $DAEMON_RC after SIGTERM"
pass "iSER portal healed: LISTEN ${ms} ms after rdma link add"
