# removal-race: the daemon reconciles while an RDMA device is being removed
# (rtnetlink events from an unrelated dummy netdev keep it busy during
# `rdma link delete`). It must not change configfs while the device is going
# away (a link removed, iser=0: the engine waits while the device index the
# listener lived on is still registered) and must heal every round.
NQN=nqn.2024-01.io.e2e:race
IQN=iqn.2024-01.io.e2e:race
A=192.0.2.1
ROUNDS=5
need_daemon

target_pair $A $NQN $IQN
must ip link add dummy0 type dummy
must ip link set dummy0 up
write_config
daemon_start || fail "daemon did not start"

storm() { # rtnetlink events for ~2 s
	_i=0
	while [ $_i -lt 20 ]; do
		ip addr add 203.0.113.$((_i + 10))/32 dev dummy0 2>/dev/null
		ip addr del 203.0.113.$((_i + 10))/32 dev dummy0 2>/dev/null
		_i=$((_i + 1))
	done
}
changed=0
r=1
while [ $r -le $ROUNDS ]; do
	storm &
	sp=$!
	rdma_del rxe0 || fail "round $r: rdma link delete"
	wait $sp
	wait_gone nvmet_rdma $A 4420 5 || fail "round $r: listener survived rdma link delete"
	sleep 0.5
	c=
	nvmet_linked 1 $NQN || c="$c link-removed"
	[ "$(lio_iser $IQN $A 3260)" = 1 ] || c="$c iser=0"
	if [ -n "$c" ]; then
		changed=$((changed + 1))
		seen="$seen round$r:$(echo $c | tr ' ' ',')"
		log "round $r: configfs changed during the outage:$c"
	fi
	t0=$(now)
	rxe_add rxe0 veth0 || fail "round $r: rdma link add"
	ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "round $r: port not healed"
	ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "round $r: portal not healed"
	nvmet_linked 1 $NQN || fail "round $r: link missing after the heal"
	[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "round $r: iser not 1 after the heal"
	log "round $r: healed (nvmet ${ms} ms, lio ${ms2} ms)"
	r=$((r + 1))
done
metric "outage_configfs_changed=$changed/$ROUNDS"
[ $changed = 0 ] || fail "in $changed of $ROUNDS removals the daemon changed configfs while the device was going away (refused rebind left it so until the device returned):$seen"
discover $A 4420 $NQN || fail "discover fails at the end"
daemon_alive || fail "the daemon died"
daemon_stop
pass "$ROUNDS removals under an event storm, all healed; configfs changed during the outage in $changed"
