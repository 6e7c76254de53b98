# status-check: `status --json` and `check` follow the kernel's truth:
# before the outage (listening=true, check 0), during it (listening=false,
# check 2: CRITICAL, no device to heal onto) and after the heal
# (listening=true, check 0). Asked of the running
# daemon, and once directly (no daemon) at the end.
NQN=nqn.2024-01.io.e2e:status
IQN=iqn.2024-01.io.e2e:status
A=192.0.2.1
LIOID=$IQN/tpgt_1/$A:3260
need_daemon

target_pair $A $NQN $IQN
write_config
daemon_start || fail "daemon did not start"

expect() { # PHASE LISTENING CHECK_RC
	l1=$(status_of nvmet 1) || fail "$1: status --json has no nvmet port 1"
	l2=$(status_of lio "$LIOID") || fail "$1: status --json has no lio portal $LIOID: $(e2eutil status <"$W/status.json" | grep lio)"
	log "$1: $l1"
	log "$1: $l2"
	echo "$l1" | grep -q "listening=$2 " || fail "$1: nvmet port 1 is not listening=$2: $l1"
	echo "$l2" | grep -q "listening=$2 " || fail "$1: lio portal is not listening=$2: $l2"
	echo "$l1" | grep -q "managed=true" || fail "$1: nvmet port 1 is not managed: $l1"
	echo "$l1" | grep -q "address=$A " || fail "$1: address is not $A: $l1"
	check_rc
	_rc=$?
	[ $_rc = $3 ] || fail "$1: check exits $_rc (want $3)"
}
listening nvmet_rdma $A 4420 || fail "port 1 does not listen at setup"
expect before true 0
must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
wait_gone ib_isert $A 3260 5 || fail "iSER listener survived rdma link delete"
expect during false 2
must rxe_add rxe0 veth0
wait_listen nvmet_rdma $A 4420 20 >/dev/null || fail "port 1 not healed"
wait_listen ib_isert $A 3260 20 >/dev/null || fail "portal not healed"
expect after true 0
discover $A 4420 $NQN || fail "discover fails after the heal"
daemon_stop
expect direct true 0
pass "status/check agree with the cm_id table before (0), during (2) and after (0)"
