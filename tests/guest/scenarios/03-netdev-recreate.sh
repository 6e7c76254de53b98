# netdev-recreate: the netdev itself is deleted (its IP and the RDMA device
# go with it) and recreated. Run 1 adds the RDMA device first and the IP
# 1 s later; run 2 adds the IP first and the device 1 s later. Both the
# nvmet port and the iSER portal must come back in both orders.
# Also sourced by the siw scenario with RTYPE=siw (nvmet only there).
RTYPE=${RTYPE:-rxe}
DEV=${RTYPE}0
NQN=nqn.2024-01.io.e2e:netdev
IQN=iqn.2024-01.io.e2e:netdev
A=192.0.2.1
LIO=${LIO:-1}
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rdev_add $RTYPE $DEV veth0
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
if [ "$LIO" = 1 ]; then
	must lio_target $IQN
	must lio_portal $IQN $A 3260
	listening ib_isert $A 3260 || fail "iSER portal does not listen at setup"
fi
listening nvmet_rdma $A 4420 || fail "port 1 does not listen at setup"
write_config
daemon_start || fail "daemon did not start"

for order in rdma-first ip-first; do
	must ip link del veth0
	wait_gone nvmet_rdma $A 4420 5 || fail "$order: nvmet listener survived the netdev deletion"
	[ -e /sys/class/infiniband/$DEV ] && fail "$order: $DEV survived its netdev"
	sleep 1
	must veth veth0 veth1
	if [ $order = rdma-first ]; then
		must rdev_add $RTYPE $DEV veth0
		sleep 1
		listening nvmet_rdma $A 4420 && fail "$order: listening without the address?"
		t0=$(now)
		must addr veth0 $A/24
	else
		must addr veth0 $A/24
		sleep 1
		t0=$(now)
		must rdev_add $RTYPE $DEV veth0
	fi
	ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "$order: port 1 not listening 20 s after the last step"
	metric "heal_ms_${order}_nvmet=$ms"
	if [ "$LIO" = 1 ]; then
		ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "$order: iSER portal not listening 20 s after the last step"
		metric "heal_ms_${order}_lio=$ms2"
	fi
	log "$order: healed (nvmet ${ms} ms, lio ${ms2:-n/a} ms)"
	summary="$summary $order:${ms}ms"
done
discover $A 4420 $NQN || fail "nvme discover fails after the heals"
daemon_alive || fail "the daemon died"
daemon_stop
pass "healed in both orders (nvmet:$summary)"
