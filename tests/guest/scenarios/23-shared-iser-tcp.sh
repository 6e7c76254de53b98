# shared-iser-tcp: healing a shared iSER endpoint never touches the
# iSCSI/TCP listener of the same address:port (the np dir itself). Targets A
# (fileio LUN) and B share 192.0.2.1:3260 with iser=1. open-iscsi (iscsid +
# iscsiadm, from Debian, in the initramfs) logs in to A over TCP before the
# reset. After the heal — once by a script (every sharer 0, then 1: the
# kernel fact, no daemon), once by the daemon — the session is the same and
# alive: same session, LOGGED_IN, the same TCP connection (both ends, same
# socket inodes) and the same TCP listening socket in /proc/net/tcp, no
# connection error in dmesg, and a block written through the session reads
# back from the backing file and through the session.
QA=iqn.2024-01.io.e2e:shtcp-a
QB=iqn.2024-01.io.e2e:shtcp-b
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
must lio_target $QA
must lio_target $QB
must lio_portal $QA $A 3260
must lio_portal $QB $A 3260
listening ib_isert $A 3260 rxe0 || fail "$A:3260 (2 sharers) does not listen at setup"

iscsid_start || fail "iscsid did not start: $(tail -n 5 "$W/iscsid.log" 2>/dev/null)"
must iscsiadm -m node -o new -T $QA -p $A:3260
must iscsiadm -m node -T $QA -p $A:3260 --login
SESS=
for s in /sys/class/iscsi_session/session*; do
	[ "$(cat "$s/targetname" 2>/dev/null)" = $QA ] && SESS=$s
done
[ -n "$SESS" ] || fail "no iSCSI session to $QA after the login"
DISK=
_i=0
while [ -z "$DISK" ]; do
	for b in "$SESS"/device/target*/*/block/*; do [ -e "$b" ] && DISK=/dev/${b##*/}; done
	[ -n "$DISK" ] && [ -b "$DISK" ] && break
	DISK=
	[ $_i -ge 100 ] && fail "no SCSI disk for $SESS 10 s after the login"
	sleep 0.1
	_i=$((_i + 1))
done
log "session $SESS: $(cat "$SESS/state") disk $DISK"
BACK=/tmp/disk_$(echo "$QA" | tr -c 'a-zA-Z0-9\n' '_').img
[ -f "$BACK" ] || fail "backing file $BACK of $QA not found"

# The TCP view of 192.0.2.1:3260: "state local remote inode" of every
# socket with that address:port on either side, sorted (0A = LISTEN, 01 =
# ESTABLISHED; the initiator and the target end of the session).
HX=$(set -- $(echo $A | tr . ' '); printf '%02X%02X%02X%02X:%04X' "$4" "$3" "$2" "$1" 3260)
tcp_view() { awk -v h="$HX" 'NR > 1 && ($2 == h || $3 == h) { print $4, $2, $3, $10 }' /proc/net/tcp | sort; }
TCP0=$(tcp_view)
log "TCP sockets of $A:3260: $(echo "$TCP0" | tr '\n' ';')"
[ "$(echo "$TCP0" | grep -c '^0A ')" = 1 ] || fail "not exactly one TCP LISTEN socket on $A:3260: $TCP0"
[ "$(echo "$TCP0" | grep -c '^01 ')" = 2 ] || fail "not exactly one established TCP connection (two ends) to $A:3260: $TCP0"
ERR0=$(dmesg | grep -c 'detected conn error')

N_IO=0
# io PHASE: write one 512-byte block through the session, read it back from
# the backing file and through the session (O_DIRECT).
io() {
	N_IO=$((N_IO + 1))
	printf 'e2e shared-iser-tcp %s %s\n' "$1" "$(now)" | dd of="$W/blk" bs=512 count=1 conv=sync 2>/dev/null
	dd if="$W/blk" of="$DISK" bs=512 count=1 seek=$((100 + N_IO)) conv=fsync 2>"$W/dd.err" || fail "$1: write to $DISK fails: $(cat "$W/dd.err")"
	dd if="$BACK" of="$W/blk.target" bs=512 count=1 skip=$((100 + N_IO)) 2>/dev/null
	cmp -s "$W/blk" "$W/blk.target" || fail "$1: the block written through the session is not in the backing file"
	dd if="$DISK" of="$W/blk.back" bs=512 count=1 skip=$((100 + N_IO)) iflag=direct 2>"$W/dd.err" || fail "$1: read from $DISK fails: $(cat "$W/dd.err")"
	cmp -s "$W/blk" "$W/blk.back" || fail "$1: the block read back through the session differs"
}
# same PHASE: the session and its TCP sockets are the ones of the start.
same() {
	[ -d "$SESS" ] || fail "$1: the iSCSI session $SESS is gone"
	[ "$(cat "$SESS/state")" = LOGGED_IN ] || fail "$1: the iSCSI session is $(cat "$SESS/state"), not LOGGED_IN"
	_v=$(tcp_view)
	[ "$_v" = "$TCP0" ] || fail "$1: the TCP sockets of $A:3260 changed (the TCP portal or the session's connection was touched): before '$(echo "$TCP0" | tr '\n' ';')', now '$(echo "$_v" | tr '\n' ';')'"
	[ "$(dmesg | grep -c 'detected conn error')" = "$ERR0" ] || fail "$1: the initiator saw a connection error: $(dmesg | grep 'detected conn error' | tail -n 2)"
	io "$1"
	log "$1: same session (LOGGED_IN), same TCP listener and connection, I/O works"
}
io setup

# ---- Part 1: the script remedy, no daemon (kernel fact) ----
must rdma_del rxe0
wait_gone ib_isert $A 3260 5 || fail "the shared iSER listener survived rdma link delete"
same "part 1, during the outage"
must rxe_add rxe0 veth0
set_isers 0 $A 3260 $QA $QB || fail "part 1: iser=0 refused"
set_isers 1 $A 3260 $QA $QB || fail "part 1: iser=1 refused"
wait_listen ib_isert $A 3260 5 >/dev/null || fail "part 1: every sharer 0 then 1 did not re-listen"
same "part 1, after the scripted heal"
log "KERNEL FACT: iser 0/1 on every sharer leaves the iSCSI/TCP listener and a logged-in TCP session alone"

# ---- Part 2: the daemon heals ----
write_config
daemon_start || fail "daemon did not start"
must rdma_del rxe0
wait_gone ib_isert $A 3260 5 || fail "part 2: the shared iSER listener survived rdma link delete"
same "part 2, during the outage"
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "part 2: $A:3260 not listening 20 s after rdma link add"
metric "heal_ms=$ms"
bad=$(wait_iser 1 $A 3260 5 $QA $QB) || fail "part 2: not every sharer reads iser=1 5 s after the LISTEN: $bad"
sleep 1
same "part 2, after the daemon's heal"
status_expect "part 2, after" lio "$QA/tpgt_1/$A:3260" "endpoint=ib_isert $A:3260" sharers=2 state=listening
check_rc || fail "part 2: check exits $? after the heal"
daemon_alive || fail "the daemon died"
daemon_stop

must iscsiadm -m node -T $QA -p $A:3260 --logout
[ -d "$SESS" ] && fail "the session is still there after the logout"
pass "the iSCSI/TCP session over $A:3260 (same sockets, I/O) survived the scripted and the daemon's heal (${ms} ms) of the shared iSER listener"
