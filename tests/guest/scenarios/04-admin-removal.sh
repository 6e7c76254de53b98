# admin-removal: during the outage the admin unlinks one of two subsystems
# from port 1, removes port 2 entirely, and sets iser=0 on one of two
# portals. When the device returns exactly the rest comes back: port 1 with
# subsystem A only, no port 2, the other portal with iSER, not this one.
NQA=nqn.2024-01.io.e2e:admin-a
NQB=nqn.2024-01.io.e2e:admin-b
IQN=iqn.2024-01.io.e2e:admin
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
must nvmet_port 2 $A 4421
must nvmet_link 2 $NQA
must lio_target $IQN
must lio_portal $IQN $A 3260
must lio_portal $IQN $A 3261
for p in 4420 4421; do listening nvmet_rdma $A $p || fail "port $p does not listen at setup"; done
for p in 3260 3261; do listening ib_isert $A $p || fail "portal $p does not listen at setup"; done
write_config
daemon_start || fail "daemon did not start"

must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
sleep 1
log "admin changes during the outage"
must nvmet_unlink 1 $NQB
must nvmet_unlink 2 $NQA
must rmdir $N/ports/2
must lio_set_iser $IQN $A 3260 0
sleep 1
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "port 1 not listening 20 s after rdma link add"
ms2=$(wait_listen ib_isert $A 3261 20 "$t0") || fail "portal 3261 not listening 20 s after rdma link add"
metric "heal_ms_nvmet=$ms"
metric "heal_ms_lio=$ms2"
# Give the daemon time to do anything more it might (wrongly) do.
sleep 3
nvmet_linked 1 $NQA || fail "subsystem A is not linked to port 1"
nvmet_linked 1 $NQB && fail "subsystem B was linked back to port 1 (the admin removed it)"
[ -e $N/ports/2 ] && fail "port 2 came back (the admin removed it)"
listening nvmet_rdma $A 4421 && fail "something listens on 4421 (port 2 was removed)"
[ "$(lio_iser $IQN $A 3260)" = 0 ] || fail "iser on 3260 reads $(lio_iser $IQN $A 3260), the admin set 0"
listening ib_isert $A 3260 && fail "iSER listens on 3260 (the admin set iser=0)"
[ "$(lio_iser $IQN $A 3261)" = 1 ] || fail "iser on 3261 does not read 1"
discover $A 4420 $NQA || fail "discover on port 1 does not list subsystem A"
grep -q "subnqn: *$NQB\$" "$W/discover.out" && fail "discover on port 1 lists subsystem B"
daemon_alive || fail "the daemon died"
daemon_stop
pass "exactly the remaining configuration was restored (nvmet ${ms} ms, lio ${ms2} ms)"
