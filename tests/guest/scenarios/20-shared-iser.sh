# shared-iser: one kernel iSER listener is shared by every TPG portal with the
# same address:port and iser=1, across targets (KERNEL.md). Targets A and B
# both have 192.0.2.1:3260 with iser=1; target C has its own 192.0.2.1:3261.
#
# Part 1, no daemon — the kernel fact (the bug): after rdma link delete + add,
# iser 0→1 on ONE sharer creates no LISTEN (the 1 re-attaches to the dead np
# the other sharer still holds), nor does toggling the other one alone
# afterwards; the sole portal of :3261 heals by its own toggle (control); only
# every sharer to 0, then every sharer to 1, re-listens :3260.
# Part 2, daemon: reset → :3260 and :3261 LISTEN within 20 s, every sharer
# reads iser=1, `status --json` names the endpoint with sharers=2 (state dead
# and no RDMA device during the outage), `check` 2 (CRITICAL) during, 0 after.
# Part 3: a third target on :3260 (sharers=3). Part 4: IPv6: the three
# targets also share [2001:db8::1]:3260 (np dir "[2001:db8::1]:3260").
QA=iqn.2024-01.io.e2e:shared-a
QB=iqn.2024-01.io.e2e:shared-b
QC=iqn.2024-01.io.e2e:shared-c
QD=iqn.2024-01.io.e2e:shared-d
A=192.0.2.1
A6=2001:db8::1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must addr veth0 $A6/64
must rxe_add rxe0 veth0
must lio_target $QA
must lio_target $QB
must lio_target $QC
must lio_portal $QA $A 3260
must lio_portal $QB $A 3260
must lio_portal $QC $A 3261
listening ib_isert $A 3260 rxe0 || fail "192.0.2.1:3260 (shared by A and B) does not listen at setup"
listening ib_isert $A 3261 rxe0 || fail "192.0.2.1:3261 (C) does not listen at setup"

# ---- Part 1: the kernel fact, no daemon ----
must rdma_del rxe0
wait_gone ib_isert $A 3260 5 || fail "the shared iSER listener survived rdma link delete"
wait_gone ib_isert $A 3261 5 || fail "the iSER listener of 3261 survived rdma link delete"
must rxe_add rxe0 veth0
must lio_set_iser $QC $A 3261 0
must lio_set_iser $QC $A 3261 1
wait_listen ib_isert $A 3261 5 >/dev/null || fail "control: iser 0→1 on the only portal of 192.0.2.1:3261 did not re-listen (KERNEL.md's single-portal remedy no longer holds)"
must lio_set_iser $QA $A 3260 0
must lio_set_iser $QA $A 3260 1
sleep 2
listening ib_isert $A 3260 && fail "kernel fact changed: iser 0→1 on one of two sharers (A) re-listened 192.0.2.1:3260 after a device reset; KERNEL.md says it re-attaches to the dead shared np"
log "KERNEL FACT (the bug): after rdma link delete/add, iser 0→1 on 1 of 2 sharers of $A:3260 (A) creates no LISTEN: B still holds the dead shared np and A's 1 re-attached to it"
must lio_set_iser $QB $A 3260 0
must lio_set_iser $QB $A 3260 1
sleep 2
listening ib_isert $A 3260 && fail "kernel fact changed: toggling the second sharer (B) alone after A re-listened 192.0.2.1:3260"
log "KERNEL FACT: toggling B alone afterwards: still no LISTEN (A re-attached to the dead np in between)"
[ "$(isers $A 3260 $QA $QB)" = "$QA=1 $QB=1" ] || fail "iser after the single toggles: $(isers $A 3260 $QA $QB), want 1 on both"
set_isers 0 $A 3260 $QA $QB || fail "iser=0 refused on a sharer of $A:3260"
set_isers 1 $A 3260 $QA $QB || fail "iser=1 refused on a sharer of $A:3260"
wait_listen ib_isert $A 3260 5 >/dev/null || fail "every sharer to 0, then every sharer to 1 did not re-listen $A:3260"
log "KERNEL FACT (the remedy): every sharer to 0, then every sharer to 1 → LISTEN"

# ---- Part 2: the daemon heals the shared endpoint ----
write_config
daemon_start || fail "daemon did not start"
LA=$QA/tpgt_1/$A:3260
LB=$QB/tpgt_1/$A:3260
LC=$QC/tpgt_1/$A:3261
status_expect before lio "$LA" "endpoint=ib_isert $A:3260" sharers=2 state=listening rdma_device=rxe0 rdma_port=1 listening=true
status_expect before lio "$LB" "endpoint=ib_isert $A:3260" sharers=2 state=listening rdma_device=rxe0 rdma_port=1
status_expect before lio "$LC" "endpoint=ib_isert $A:3261" sharers=1 state=listening rdma_device=rxe0 rdma_port=1
check_rc || fail "before: check exits $? with every listener alive"

# reset PHASE SHARERS_3260: rdma link delete, check the outage, add, wait for
# every endpoint ($EPS: "addr port" pairs separated by ','), check the result.
reset() {
	must rdma_del rxe0
	wait_gone ib_isert $A 3260 5 || fail "$1: the shared iSER listener survived rdma link delete"
	sleep 1
	status_expect "$1, during the outage" lio "$LA" state=dead rdma_device= rdma_port=0 sharers=$2
	check_rc
	rc=$?
	[ $rc = 2 ] || fail "$1: check exits $rc during the outage, want 2 (CRITICAL: a managed listener is dead)"
	all_iser 1 $A 3260 $SH >/dev/null || fail "$1: iser changed during the outage: $(isers $A 3260 $SH)"
	t0=$(now)
	must rxe_add rxe0 veth0
	ms=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "$1: $A:3260 ($2 sharers) not listening 20 s after rdma link add"
	ms2=$(wait_listen ib_isert $A 3261 20 "$t0") || fail "$1: $A:3261 (1 sharer) not listening 20 s after rdma link add"
	metric "${1}_heal_ms_3260=$ms"
	metric "${1}_heal_ms_3261=$ms2"
	# Every sharer is written 1 at the end of the heal; give it the time.
	bad=$(wait_iser 1 $A 3260 5 $SH) || fail "$1: not every sharer of $A:3260 reads iser=1 5 s after the LISTEN: $bad"
	[ "$(lio_iser $QC $A 3261)" = 1 ] || fail "$1: iser of C ($A:3261) reads $(lio_iser $QC $A 3261), not 1"
	for l in $LIDS; do
		status_expect "$1, after" lio "$l" "endpoint=ib_isert $A:3260" sharers=$2 state=listening rdma_device=rxe0 rdma_port=1 listening=true
	done
	status_expect "$1, after" lio "$LC" sharers=1 state=listening
	check_rc || fail "$1: check exits $? after the heal"
	log "$1: healed, $A:3260 with $2 sharers ${ms} ms, $A:3261 ${ms2} ms after rdma link add"
	HEALED="$HEALED, $2 sharers ${ms} ms"
}
HEALED=
SH="$QA $QB"
LIDS="$LA $LB"
reset two 2

# ---- Part 3: three sharers ----
must lio_target $QD
must lio_portal $QD $A 3260
LD=$QD/tpgt_1/$A:3260
SH="$QA $QB $QD"
LIDS="$LA $LB $LD"
listening ib_isert $A 3260 || fail "$A:3260 stopped listening when a third sharer was added"
status_expect "three, before" lio "$LD" "endpoint=ib_isert $A:3260" sharers=3 state=listening
reset three 3

# ---- Part 4: IPv6, the three targets also share [2001:db8::1]:3260 ----
for q in $SH; do must lio_portal $q $A6 3260; done
listening ib_isert $A6 3260 rxe0 || fail "[$A6]:3260 does not listen at setup"
for q in $SH; do
	[ -d "$T/iscsi/$q/tpgt_1/np/[$A6]:3260" ] || fail "no np dir '[$A6]:3260' under $q (np_name)"
	status_expect "ipv6, before" lio "$q/tpgt_1/[$A6]:3260" "endpoint=ib_isert [$A6]:3260" sharers=3 state=listening rdma_device=rxe0 rdma_port=1
done
must rdma_del rxe0
wait_gone ib_isert $A6 3260 5 || fail "ipv6: the shared IPv6 iSER listener survived rdma link delete"
sleep 1
status_expect "ipv6, during the outage" lio "$QA/tpgt_1/[$A6]:3260" state=dead rdma_device= sharers=3
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen ib_isert $A6 3260 20 "$t0") || fail "ipv6: [$A6]:3260 (3 sharers) not listening 20 s after rdma link add"
ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "ipv6: $A:3260 (3 sharers) not listening 20 s after rdma link add"
wait_listen ib_isert $A 3261 20 >/dev/null || fail "ipv6: $A:3261 not listening 20 s after rdma link add"
metric "ipv6_heal_ms=$ms"
HEALED="$HEALED, IPv6 3 sharers ${ms} ms"
metric "ipv6_heal_ms_v4=$ms2"
bad=$(wait_iser 1 $A6 3260 5 $SH) || fail "ipv6: not every sharer of [$A6]:3260 reads iser=1 5 s after the LISTEN: $bad"
bad=$(all_iser 1 $A 3260 $SH) || fail "ipv6: not every sharer of $A:3260 reads iser=1: $bad"
status_expect "ipv6, after" lio "$QD/tpgt_1/[$A6]:3260" "endpoint=ib_isert [$A6]:3260" sharers=3 state=listening rdma_device=rxe0 rdma_port=1
check_rc || fail "ipv6: check exits $? after the heal"
daemon_alive || fail "the daemon died"
daemon_stop
[ "$DAEMON_RC" = 0 ] || fail "daemon exit status $DAEMON_RC after SIGTERM"
pass "kernel: toggling one sharer does not re-listen, all-0-then-all-1 does; daemon healed the shared endpoint${HEALED} after rdma link add"
