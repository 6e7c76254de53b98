# shared-iser-crash: the daemon crashes (NVMET_REBIND_FAULT=
# crash-after-all-iser-0: exit 137 right after it wrote iser=0 on every
# sharer of an endpoint, before any iser=1). Every sharer then reads 0 and
# nothing listens; a restarted daemon (no fault) finishes from its journal:
# every sharer back at 1, LISTEN.
# Part 1: two sharers (A, B on 192.0.2.1:3260).
# Part 2: three sharers; before the outage the admin sets B to 0 (the daemon
# is running and sees it). After the crash and the restart A and C are back
# at 1 and B stays 0: the journal holds only the sharers that were at 1.
QA=iqn.2024-01.io.e2e:shcrash-a
QB=iqn.2024-01.io.e2e:shcrash-b
QC=iqn.2024-01.io.e2e:shcrash-c
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
for q in $QA $QB $QC; do must lio_target $q; done
must lio_portal $QA $A 3260
must lio_portal $QB $A 3260
listening ib_isert $A 3260 rxe0 || fail "$A:3260 (2 sharers) does not listen at setup"
write_config

# crash PART SHARERS…: reset with the fault daemon running; it must exit 137
# leaving every listed sharer at 0 and nothing listening.
crash() {
	_part=$1
	shift
	must rdma_del rxe0
	wait_gone ib_isert $A 3260 5 || fail "$_part: the shared iSER listener survived rdma link delete"
	must rxe_add rxe0 veth0
	daemon_wait_exit 20 || fail "$_part: the daemon with NVMET_REBIND_FAULT=crash-after-all-iser-0 did not crash within 20 s of rdma link add ($(isers $A 3260 "$@"))"
	[ "$DAEMON_RC" = 137 ] || fail "$_part: the daemon exited with $DAEMON_RC, not 137 (the fault point)"
	log "$_part: after the crash: $(isers $A 3260 "$@")"
	bad=$(all_iser 0 $A 3260 "$@") || fail "$_part: after a crash after all iser=0, not every sharer reads 0: $bad"
	listening ib_isert $A 3260 && fail "$_part: $A:3260 listens with every sharer at iser=0"
	return 0
}

# ---- Part 1: two sharers ----
daemon_start NVMET_REBIND_FAULT=crash-after-all-iser-0 || fail "part 1: daemon did not start"
crash "part 1" $QA $QB
t0=$(now)
daemon_start || fail "part 1: the restarted daemon did not start"
ms=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "part 1: $A:3260 not listening 20 s after the restart ($(isers $A 3260 $QA $QB))"
metric "resume_ms_2=$ms"
bad=$(wait_iser 1 $A 3260 5 $QA $QB) || fail "part 1: not every sharer reads iser=1 5 s after the LISTEN: $bad"
status_expect "part 1, after" lio "$QA/tpgt_1/$A:3260" sharers=2 state=listening
check_rc || fail "part 1: check exits $? after the restart healed"
daemon_stop

# ---- Part 2: three sharers, the admin set B to 0 before the outage ----
must lio_portal $QC $A 3260
listening ib_isert $A 3260 rxe0 || fail "part 2: $A:3260 (3 sharers) does not listen"
daemon_start NVMET_REBIND_FAULT=crash-after-all-iser-0 || fail "part 2: daemon did not start"
log "the admin sets iser=0 on B before the outage"
must lio_set_iser $QB $A 3260 0
sleep 1
listening ib_isert $A 3260 || fail "part 2: $A:3260 stopped listening when one of three sharers went to 0"
status_expect "part 2, before the outage" lio "$QA/tpgt_1/$A:3260" sharers=2 state=listening
crash "part 2" $QA $QB $QC
t0=$(now)
daemon_start || fail "part 2: the restarted daemon did not start"
ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "part 2: $A:3260 not listening 20 s after the restart ($(isers $A 3260 $QA $QB $QC))"
metric "resume_ms_3=$ms2"
bad=$(wait_iser 1 $A 3260 5 $QA $QC) || fail "part 2: A and C do not both read iser=1 5 s after the LISTEN: $bad"
sleep 2
[ "$(lio_iser $QB $A 3260)" = 0 ] || fail "part 2: B reads iser=$(lio_iser $QB $A 3260) after the restart: the admin set it to 0 before the outage, it must stay 0"
bad=$(all_iser 1 $A 3260 $QA $QC) || fail "part 2: $bad after the restart, want A and C at 1"
status_expect "part 2, after" lio "$QA/tpgt_1/$A:3260" sharers=2 state=listening
check_rc || fail "part 2: check exits $? after the restart healed"
daemon_alive || fail "the restarted daemon died"
daemon_stop
pass "crash after all iser=0 recovered from the journal: 2 sharers ${ms} ms, 3 sharers (admin's 0 kept) ${ms2} ms after the restart"
