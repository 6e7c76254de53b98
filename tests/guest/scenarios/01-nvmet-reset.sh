# nvmet-reset: an nvmet port on a specific IPv4 address with a subsystem
# linked; `rdma link delete` + `add` of its RDMA device on the same netdev →
# the daemon restores LISTEN and discover works.
# Metric heal_ms: from `rdma link add` to LISTEN in the cm_id table.
# Also sourced by the siw scenario with RTYPE=siw.
RTYPE=${RTYPE:-rxe}
DEV=${RTYPE}0
NQN=nqn.2024-01.io.e2e:reset
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rdev_add $RTYPE $DEV veth0
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
listening nvmet_rdma $A 4420 $DEV || fail "port 1 does not listen at setup"
write_config
daemon_start || fail "daemon did not start"

for round in 1 2; do
	must rdma_del $DEV
	wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
	sleep 1
	# Nothing can be bound without a device: configfs should stay as the
	# admin left it (a refused rebind during the removal leaves the link out
	# until the device returns): the engine must not write while it goes away.
	nvmet_linked 1 $NQN || fail "round $round: the subsystem link is gone during the outage (the daemon tried a rebind while the device was going away)"
	t0=$(now)
	must rdev_add $RTYPE $DEV veth0
	ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "round $round: port 1 not listening 20 s after rdma link add"
	log "round $round: LISTEN ${ms} ms after rdma link add"
	metric "heal_ms_round$round=$ms"
	[ $round = 1 ] && first=$ms
done
listening nvmet_rdma $A 4420 $DEV || fail "listener not on $DEV"
nvmet_linked 1 $NQN || fail "the subsystem link is missing after the heal"
discover $A 4420 $NQN || fail "nvme discover fails after the heal"
daemon_alive || fail "the daemon died"
daemon_stop
[ "$DAEMON_RC" = 0 ] || fail "daemon exit status $DAEMON_RC after SIGTERM"
metric "heal_ms=$first"
pass "$RTYPE reset healed: LISTEN ${first} ms / ${ms} ms after rdma link add, discover works"
