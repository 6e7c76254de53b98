# shared-iser-admin: during an outage the admin changes some sharers of a
# shared iSER listener; the daemon heals what is left and keeps the admin's
# changes. 192.0.2.1:3260 is shared by targets A, B, C; 192.0.2.1:3261 by A,
# B, C, D. During the outage (after rdma link delete, before add) the admin
# sets iser=0 on B and removes C's np dir, on both ports (both work while
# the device is gone: asserted, KERNEL.md). When the device returns: :3260
# listens with A alone (sharers=1), :3261 with A and D (sharers=2: still a
# shared endpoint, so it needs the every-sharer heal), B stays at 0 (its np
# dir, the iSCSI/TCP portal, stays), C's nps stay removed.
QA=iqn.2024-01.io.e2e:shadm-a
QB=iqn.2024-01.io.e2e:shadm-b
QC=iqn.2024-01.io.e2e:shadm-c
QD=iqn.2024-01.io.e2e:shadm-d
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
for q in $QA $QB $QC $QD; do must lio_target $q; done
for q in $QA $QB $QC; do must lio_portal $q $A 3260; done
for q in $QA $QB $QC $QD; do must lio_portal $q $A 3261; done
listening ib_isert $A 3260 rxe0 || fail "$A:3260 (3 sharers) does not listen at setup"
listening ib_isert $A 3261 rxe0 || fail "$A:3261 (4 sharers) does not listen at setup"
write_config
daemon_start || fail "daemon did not start"
status_expect before lio "$QA/tpgt_1/$A:3260" "endpoint=ib_isert $A:3260" sharers=3 state=listening
status_expect before lio "$QA/tpgt_1/$A:3261" "endpoint=ib_isert $A:3261" sharers=4 state=listening

must rdma_del rxe0
wait_gone ib_isert $A 3260 5 || fail "the shared iSER listener of 3260 survived rdma link delete"
wait_gone ib_isert $A 3261 5 || fail "the shared iSER listener of 3261 survived rdma link delete"
sleep 1
log "admin changes during the outage: iser=0 on B, rmdir of C's np (3260 and 3261)"
for p in 3260 3261; do
	must lio_set_iser $QB $A $p 0
	[ "$(lio_iser $QB $A $p)" = 0 ] || fail "iser=0 on B ($p) did not stick during the outage: reads $(lio_iser $QB $A $p)"
	must rmdir "$(lio_np $QC $A $p)"
	[ -e "$(lio_np $QC $A $p)" ] && fail "C's np $A:$p still exists after rmdir during the outage"
done
log "KERNEL FACT: iser=0 and rmdir of a sharer's np (iser=1) both work while the device is gone"
sleep 1
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "$A:3260 not listening 20 s after rdma link add (A is still a sharer with iser=1; B set to 0 and C removed by the admin)"
ms2=$(wait_listen ib_isert $A 3261 20 "$t0") || fail "$A:3261 not listening 20 s after rdma link add (A and D still share it with iser=1; B set to 0 and C removed by the admin)"
metric "heal_ms_1_sharer=$ms"
metric "heal_ms_2_sharers=$ms2"
# Give the daemon time to do anything more it might (wrongly) do.
sleep 3
for p in 3260 3261; do
	[ "$(lio_iser $QA $A $p)" = 1 ] || fail "A's iser ($p) reads $(lio_iser $QA $A $p) after the heal, not 1"
	[ "$(lio_iser $QB $A $p)" = 0 ] || fail "B's iser ($p) reads $(lio_iser $QB $A $p): the admin set 0 during the outage, it must stay 0"
	[ -d "$(lio_np $QB $A $p)" ] || fail "B's np dir $A:$p (the iSCSI/TCP portal) is gone: nobody removed it"
	[ -e "$(lio_np $QC $A $p)" ] && fail "C's np $A:$p came back ($(isers $A $p $QC)): the admin removed it during the outage"
	listening ib_isert $A $p rxe0 || fail "$A:$p stopped listening after the heal"
done
[ "$(lio_iser $QD $A 3261)" = 1 ] || fail "D's iser (3261) reads $(lio_iser $QD $A 3261) after the heal, not 1"
[ -d "$T/iscsi/$QC/tpgt_1" ] || fail "C's tpgt_1 is gone: the admin removed only the nps"
status_expect after lio "$QA/tpgt_1/$A:3260" "endpoint=ib_isert $A:3260" sharers=1 state=listening rdma_device=rxe0 rdma_port=1
status_expect after lio "$QD/tpgt_1/$A:3261" "endpoint=ib_isert $A:3261" sharers=2 state=listening rdma_device=rxe0 rdma_port=1
check_rc || fail "check exits $? after the heal"
daemon_alive || fail "the daemon died"
daemon_stop
pass "what the admin left healed (1 sharer ${ms} ms, 2 sharers ${ms2} ms after rdma link add); the admin's iser=0 and np removals stayed"
