# vlan: RoCE on a VLAN, the usual production layout — rxe0 sits on veth0,
# the address on veth0.100 above it (veth1.100 is the peer's side; the host
# here is in the guest and reaches the address through rxe's loopback).
# Kernel facts first, without the daemon: rxe0 port 1's GID table holds the
# VLAN's address (ndev veth0.100) while `rdma link` names only veth0, and the
# nvmet port 192.0.2.1:4420 and the LIO iSER portal 192.0.2.1:3260 listen on
# rxe0. Then with the daemon: status says rdma_device=rxe0, state=listening;
# round 1: rdma link delete/add rxe0 → both LISTEN again (metric heal_ms),
# discover, connect + I/O + disconnect; round 2: veth0 itself is deleted (the
# VLAN and rxe0 go with it) and recreated, rxe0 first and the VLAN with its
# address 1 s later → healed once the address is back in rxe0's GID table
# (metric heal2_ms, from the address add).
# Also sourced by macvlan (UPPER=macvlan: 198.51.100.1 on mv0 over veth0).
UPPER=${UPPER:-vlan}
case $UPPER in
vlan) A=192.0.2.1 UP=veth0.100 ;;
macvlan) A=198.51.100.1 UP=mv0 ;;
esac
NQN=nqn.2024-01.io.e2e:$UPPER
IQN=iqn.2024-01.io.e2e:$UPPER
LIOID=$IQN/tpgt_1/$A:3260

# upper_add: the VLAN (both ends) or the macvlan above veth0, up.
upper_add() {
	case $UPPER in
	vlan)
		ip link add link veth0 name veth0.100 type vlan id 100 && ip link set veth0.100 up &&
			ip link add link veth1 name veth1.100 type vlan id 100 && ip link set veth1.100 up
		;;
	macvlan)
		ip link add link veth0 name mv0 type macvlan mode bridge && ip link set mv0 up
		;;
	esac
}

must veth veth0 veth1
must upper_add
must addr $UP $A/24
must rxe_add rxe0 veth0
rdma link show | grep -q "^link rxe0/1 .* netdev veth0 *$" || fail "rdma link does not name veth0 for rxe0: $(rdma link show)"
gid_entries $A | sed 's/^/      GID /'
[ "$(gid_carriers $A)" = rxe0/1 ] || fail "kernel fact: $A (on $UP) is not in rxe0 port 1's GID table: $(gid_entries $A)"
gid_entries $A | grep -q " $UP " || fail "kernel fact: the GID entry of $A does not name $UP: $(gid_entries $A)"
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
must lio_target $IQN
must lio_portal $IQN $A 3260
listening nvmet_rdma $A 4420 rxe0 || fail "kernel fact: the port on $A ($UP) does not listen on rxe0"
listening ib_isert $A 3260 rxe0 || fail "kernel fact: the iSER portal on $A ($UP) does not listen on rxe0"
discover $A 4420 $NQN || fail "kernel fact: discover to $A over rxe0 fails (no daemon yet)"
log "kernel facts hold: $A on $UP is carried by rxe0/1; both listen on rxe0; discover works"

need_daemon
write_config
daemon_start || fail "daemon did not start"
status_expect before nvmet 1 state=listening rdma_device=rxe0 rdma_port=1 "endpoint=nvmet_rdma $A:4420"
status_expect before lio "$LIOID" state=listening rdma_device=rxe0 rdma_port=1
status_field "$(status_of nvmet 1)" sharers | grep -qx '[1-9][0-9]*' || fail "status has no sharers count: $(status_of nvmet 1)"
check_rc || fail "check exits $? before the reset (want 0)"

# Round 1: the RDMA device resets.
must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "round 1: listener survived rdma link delete"
wait_gone ib_isert $A 3260 5 || fail "round 1: iSER listener survived rdma link delete"
sleep 1
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "round 1: port 1 not listening 20 s after rdma link add"
ms_lio=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "round 1: iSER portal not listening 20 s after rdma link add"
log "round 1: LISTEN ${ms} ms (nvmet), ${ms_lio} ms (iSER) after rdma link add"
metric "heal_ms=$ms"
metric "heal_lio_ms=$ms_lio"
listening nvmet_rdma $A 4420 rxe0 || fail "round 1: the port listens, but not on rxe0"
listening ib_isert $A 3260 rxe0 || fail "round 1: the portal listens, but not on rxe0"
discover $A 4420 $NQN || fail "round 1: discover fails after the heal"
host_connect $A 4420 $NQN || fail "round 1: nvme connect fails after the heal"
host_io || fail "round 1: I/O on /dev/${CTRL}n1 fails"
host_disconnect $NQN || fail "round 1: nvme disconnect fails"

# Round 2: the netdev goes (a NIC re-registering its netdev takes every VLAN
# or macvlan above it along) and comes back, the upper device 1 s after
# rxe0, as a network manager re-creates it.
must ip link del veth0
wait_gone nvmet_rdma $A 4420 5 || fail "round 2: listener survived the deletion of veth0"
sleep 1
[ -z "$(ls /sys/class/infiniband)" ] || fail "round 2: rxe0 survived the deletion of veth0"
must veth veth0 veth1
must rxe_add rxe0 veth0
sleep 1
t0=$(now)
must upper_add
must addr $UP $A/24
ms2=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "round 2: port 1 not listening 20 s after $A came back on $UP"
wait_listen ib_isert $A 3260 20 "$t0" >/dev/null || fail "round 2: iSER portal not listening 20 s after $A came back on $UP"
log "round 2: LISTEN ${ms2} ms after the address came back on $UP"
metric "heal2_ms=$ms2"
listening nvmet_rdma $A 4420 rxe0 || fail "round 2: the port listens, but not on rxe0"
discover $A 4420 $NQN || fail "round 2: discover fails after the heal"
status_expect after nvmet 1 state=listening rdma_device=rxe0 rdma_port=1
status_expect after lio "$LIOID" state=listening rdma_device=rxe0 rdma_port=1
check_rc || fail "check exits $? after the heal (want 0)"
daemon_alive || fail "the daemon died"
daemon_stop
pass "$A on $UP (rxe0 on veth0): reset healed in ${ms} ms, netdev re-creation in ${ms2} ms; discover, connect, I/O"
