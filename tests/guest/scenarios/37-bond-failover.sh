# bond-failover: an active-backup bond over two RoCE ports without RoCE LAG
# (each port its own RDMA device: rxe0 on veth0, rxe1 on veth2; bond0 holds
# 192.0.2.5/24, default fail_over_mac=none). The RoCE GID table gives the
# bond's address to the active slave's RDMA device only, so a failover
# moves it from rxe0 to rxe1 with no address event at all (only the bond's
# link change). nvmet port 1 on 192.0.2.5:4420, LIO iSER portal :3260.
# Kernel facts first, without the daemon: the GID follows the active slave;
# with fail_over_mac=none the bond's MAC does not change, so rdma_cm sends no
# ADDR_CHANGE and nothing re-binds: the listeners stay on rxe0 and discover
# fails (waited past the kernel's 5 s repair period); after the failback
# discover works again. Then with the daemon: failover and failback, each
# time both LISTEN on the active slave's device within 12 s, discover works,
# check 0 (metric failover_heal_ms).
A=192.0.2.5
NQN=nqn.2024-01.io.e2e:bond
IQN=iqn.2024-01.io.e2e:bond
LIOID=$IQN/tpgt_1/$A:3260

dev_of() { case $1 in veth0) echo rxe0 ;; veth2) echo rxe1 ;; esac; }
other() { case $1 in rxe0) echo rxe1 ;; rxe1) echo rxe0 ;; esac; }
only_on() {
	listening nvmet_rdma $A 4420 "$1" && listening ib_isert $A 3260 "$1" &&
		! listening nvmet_rdma $A 4420 "$(other "$1")" && ! listening ib_isert $A 3260 "$(other "$1")"
}
# failover SLAVE: make SLAVE the active one.
failover() {
	log "bond0: active slave -> $1"
	ip link set bond0 type bond active_slave "$1" &&
		grep -q "Currently Active Slave: $1" /proc/net/bonding/bond0
}

must ip link add bond0 type bond mode active-backup miimon 100
must veth veth0 veth1
must veth veth2 veth3
for s in veth0 veth2; do
	must ip link set $s down
	must ip link set $s master bond0
done
must ip link set bond0 up
must addr bond0 $A/24
must rxe_add rxe0 veth0
must rxe_add rxe1 veth2
failover veth0 || fail "cannot make veth0 the active slave: $(cat /proc/net/bonding/bond0)"
wait_carrier $A rxe0/1 5 || fail "kernel fact: the bond's address is not carried by the active slave's rxe0/1 alone: $(gid_entries $A)"
gid_entries $A | sed 's/^/      GID: /'
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
must lio_target $IQN
must lio_portal $IQN $A 3260
only_on rxe0 || fail "the port and the portal do not listen on rxe0 (only) at setup"
discover $A 4420 $NQN || fail "discover fails at setup"

# ---- kernel facts (no daemon) ----
e0=$(port_enables 1)
c0=$(cmid_line ib_isert $A 3260)
failover veth2 || fail "failover to veth2 did not happen: $(cat /proc/net/bonding/bond0)"
wait_carrier $A rxe1/1 5 || fail "kernel fact: the GID of $A did not follow the active slave to rxe1/1: $(gid_entries $A)"
gid_entries $A | sed 's/^/      GID after the failover: /'
sleep 6
if only_on rxe1; then
	log "kernel fact: the kernel re-bound both listeners to rxe1 by itself (ADDR_CHANGE)"
	kernel=repaired
else
	only_on rxe0 || fail "kernel fact: after the failover the listeners are neither on rxe0 nor on rxe1 only"
	[ "$(port_enables 1)" = "$e0" ] || fail "kernel fact: port 1 was re-enabled, but still listens on rxe0"
	[ "$(cmid_line ib_isert $A 3260)" = "$c0" ] || fail "kernel fact: the iSER listener was re-created on rxe0"
	if discover $A 4420 $NQN; then
		fail "kernel fact: discover works with the listener stranded on rxe0 after the failover"
	fi
	log "kernel fact: stranded after the failover — LISTEN stays on rxe0, discover fails"
	kernel=stranded
fi
failover veth0 || fail "failback to veth0 did not happen"
wait_carrier $A rxe0/1 5 || fail "the GID of $A did not come back to rxe0/1: $(gid_entries $A)"
if [ $kernel = stranded ]; then
	ok=
	for i in 1 2 3 4 5; do discover $A 4420 $NQN && ok=1 && break; sleep 1; done
	[ -n "$ok" ] || fail "kernel fact: discover does not work again after the failback"
else
	sleep 6
	only_on rxe0 || fail "kernel fact: the kernel did not re-bind to rxe0 after the failback"
fi

# ---- with the daemon ----
need_daemon
write_config
daemon_start || fail "daemon did not start"
status_expect before nvmet 1 state=listening rdma_device=rxe0 rdma_port=1
check_rc || fail "check exits $? before the failover (want 0)"
for s in veth2 veth0; do
	dev=$(dev_of $s)
	failover $s || fail "failover to $s did not happen"
	t0=$(now)
	i=0
	while ! only_on "$dev"; do
		[ $i -ge 60 ] && fail "failover to $s: the listeners are not on $dev (only) 12 s later (status: $(status_of nvmet 1))"
		sleep 0.2
		i=$((i + 1))
	done
	ms=$(e2eutil since "$t0")
	log "failover to $s: both listen on $dev only, ${ms} ms later"
	metric "failover_heal_ms_to_$dev=$ms"
	discover $A 4420 $NQN || fail "failover to $s: discover fails after the re-bind"
	[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "failover to $s: iser is not 1"
	status_expect "after failover to $s" nvmet 1 state=listening rdma_device=$dev
	status_expect "after failover to $s" lio "$LIOID" state=listening rdma_device=$dev
	check_rc || fail "failover to $s: check exits $? (want 0)"
done
daemon_alive || fail "the daemon died"
daemon_stop
pass "bond failover moves the GID (kernel: $kernel); re-bound to the active slave's device (last ${ms} ms)"
