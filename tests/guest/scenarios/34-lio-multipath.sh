# lio-multipath: the layout of OpenStack Cinder's LIO target with
# target_secondary_ip_addresses and target_protocol = iser
# (cinder/cmd/rtstool.py create -a<ip1,ip2>: one target per volume, one TPG,
# a portal on every address, iser on each; ClusterLabs iSCSITarget (lio-t)
# with portals="ip1:3260 ip2:3260" iser_portals="ip1 ip2" is the same).
# Three targets, each with portals on 192.0.2.1:3260 (rxe0/veth0) and
# 198.51.100.1:3260 (rxe1/veth2), iser=1: each address has one iSER listener
# shared by three TPGs, and each TPG has listeners on two RDMA devices.
# rxe1 reset → the 198.51.100.1 listener is back on rxe1, the 192.0.2.1 one
# is left alone (same cm_id); then rxe0 reset → the reverse. Every iser
# still reads 1; status and check agree. Metric heal_ms (per device).
A=192.0.2.1
B=198.51.100.1
IQNS="iqn.2024-01.io.e2e:volume-1 iqn.2024-01.io.e2e:volume-2 iqn.2024-01.io.e2e:volume-3"

must veth veth0 veth1
must veth veth2 veth3
must addr veth0 $A/24
must addr veth2 $B/24
must rxe_add rxe0 veth0
must rxe_add rxe1 veth2
for q in $IQNS; do
	must lio_target $q
	must lio_portal $q $A 3260
	must lio_portal $q $B 3260
done
listening ib_isert $A 3260 rxe0 || fail "no iSER listener for $A on rxe0"
listening ib_isert $B 3260 rxe1 || fail "no iSER listener for $B on rxe1"
[ "$(cmid_line ib_isert $A 3260 | wc -l)" = 1 ] || fail "kernel fact: not one shared iSER listener for $A:3260: $(cmid_line ib_isert $A 3260)"

need_daemon
write_config
daemon_start || fail "daemon did not start"
check_rc || fail "check exits $? at setup (want 0)"

# reset DEV NETDEV ADDR OTHER_ADDR
reset() {
	keep=$(cmid_line ib_isert $4 3260)
	must rdma_del $1
	wait_gone ib_isert $3 3260 5 || fail "$1: iSER listener survived rdma link delete"
	sleep 1
	t0=$(now)
	must rxe_add $1 $2
	ms=$(wait_listen ib_isert $3 3260 20 "$t0") || fail "$1: $3:3260 not listening 20 s after rdma link add (iser: $(for q in $IQNS; do lio_iser $q $3 3260; done | tr '\n' ' '))"
	log "$1: $3:3260 LISTEN ${ms} ms after rdma link add"
	metric "heal_ms_$1=$ms"
	listening ib_isert $3 3260 $1 || fail "$1: $3:3260 listens, but not on $1"
	sleep 2
	[ "$(cmid_line ib_isert $4 3260)" = "$keep" ] || fail "$1: the listener of $4:3260 (other device) was re-created: '$keep' -> '$(cmid_line ib_isert $4 3260)'"
	for q in $IQNS; do
		for a in $A $B; do
			[ "$(lio_iser $q $a 3260)" = 1 ] || fail "$1: iser of $q $a:3260 is not 1 after the heal"
		done
		status_expect "after $1" lio "$q/tpgt_1/$3:3260" state=listening rdma_device=$1
	done
	check_rc || fail "$1: check exits $? after the heal (want 0)"
}
reset rxe1 veth2 $B $A
reset rxe0 veth0 $A $B
daemon_alive || fail "the daemon died"
daemon_stop
pass "3 targets × 2 addresses on 2 devices: each reset healed only its own shared listener (last ${ms} ms)"
