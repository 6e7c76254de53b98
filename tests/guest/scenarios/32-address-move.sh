# address-move: an address moves between netdevs under two RDMA devices
# (rxe0 on veth0, rxe1 on veth2) — an HA address moved, bonding failover
# without RoCE LAG, an admin re-addressing. nvmet port 1 on 192.0.2.3:4420
# and a LIO iSER portal 192.0.2.3:3260.
# Kernel facts first, without the daemon: the GID of 192.0.2.3 leaves rxe0's
# table and appears in rxe1's; both listeners stay on rxe0 ("stranded":
# still LISTEN in the cm_id table), nothing re-binds them (waited past the
# kernel's 5 s repair period), and `nvme discover` to the address fails.
# Still without the daemon, `check` says CRITICAL, and `trigger` (the udev
# hook as run without systemd) waits out the grace itself and re-binds
# them onto rxe1; moved back, onto rxe0, and discover works again.
# Then with the daemon (pin_device=false), the address moves to veth2 and
# back: each time status shows state=stranded (unless the heal was faster
# than the poll), within 12 s both LISTEN on the device that carries the
# address and on no other, discover works, check exits 0 (metric
# move_heal_ms). With pin_device=true: reported stranded (reason "stranded…",
# check 2: CRITICAL, past the kernel's repair grace) and left alone — LISTEN stays on rxe0, the port is never
# re-enabled — until the address comes back to veth0 (check 0).
NQN=nqn.2024-01.io.e2e:move
IQN=iqn.2024-01.io.e2e:move
A=192.0.2.3
LIOID=$IQN/tpgt_1/$A:3260

# dev_of NETDEV: the RDMA device on it.
dev_of() { case $1 in veth0) echo rxe0 ;; veth2) echo rxe1 ;; esac; }
other() { case $1 in rxe0) echo rxe1 ;; rxe1) echo rxe0 ;; esac; }
# only_on DEV: both listeners on DEV and on no other device.
only_on() {
	listening nvmet_rdma $A 4420 "$1" && listening ib_isert $A 3260 "$1" &&
		! listening nvmet_rdma $A 4420 "$(other "$1")" && ! listening ib_isert $A 3260 "$(other "$1")"
}

must veth veth0 veth1
must veth veth2 veth3
must addr veth0 $A/24
must rxe_add rxe0 veth0
must rxe_add rxe1 veth2
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
must lio_target $IQN
must lio_portal $IQN $A 3260
only_on rxe0 || fail "the port and the portal do not listen on rxe0 (only) at setup"
[ "$(gid_carriers $A)" = rxe0/1 ] || fail "kernel fact: $A is not carried by rxe0/1 alone: $(gid_entries $A)"
discover $A 4420 $NQN || fail "discover fails at setup"

# ---- kernel facts (no daemon) ----
must move_addr $A/24 veth0 veth2
wait_carrier $A rxe1/1 5 || fail "kernel fact: the GID of $A did not move to rxe1/1 alone: $(gid_entries $A)"
gid_entries $A | sed 's/^/      GID after the move: /'
e0=$(port_enables 1)
c0=$(cmid_line ib_isert $A 3260)
sleep 6
only_on rxe0 || fail "kernel fact: the listeners did not stay on rxe0 after the move (something re-bound them)"
[ "$(port_enables 1)" = "$e0" ] || fail "kernel fact: the kernel re-enabled port 1 by itself after the move"
[ "$(cmid_line ib_isert $A 3260)" = "$c0" ] || fail "kernel fact: the iSER listener was re-created by the kernel"
if discover $A 4420 $NQN; then
	fail "kernel fact: discover to $A works with the listener stranded on rxe0 (the address is on rxe1's netdev)"
fi
log "kernel fact: stranded — LISTEN stays on rxe0 ($(cmid_line nvmet_rdma $A 4420)), discover via rxe1 fails"
# No daemon: check reads the kernel itself, and nothing saw when the
# listeners went down, so they are not "within the repair grace" (6 s
# after the move, and at every look): CRITICAL.
need_daemon
write_config
check_rc
rc=$?
[ $rc = 2 ] && grep -q '^CRITICAL: nvmet 1 .*stranded' "$W/check.out" && grep -q '^source: direct' "$W/check.out" ||
	fail "no daemon, stranded 6 s: check exits $rc (want 2, CRITICAL, stranded, source: direct): $(head -n 3 "$W/check.out" | tr '\n' ' ')"
# No daemon: the udev hook's trigger (here by hand, as udev runs it
# without systemd) sees the stranded listeners for the first time, waits
# out the kernel's 5 s repair grace itself and re-binds them where the
# address is (one round alone held them, and every later trigger held
# them again). And back, the same way.
for to in rxe1 rxe0; do
	if [ $to = rxe0 ]; then
		must move_addr $A/24 veth2 veth0
		wait_carrier $A rxe0/1 5 || fail "the GID of $A did not come back to rxe0/1: $(gid_entries $A)"
	fi
	t=$(now)
	rb trigger >"$W/trigger.out" 2>&1 || fail "trigger without a daemon, stranded: exit $?: $(tail -n 3 "$W/trigger.out" | tr '\n' ' ')"
	tms=$(e2eutil since "$t")
	only_on $to || fail "trigger without a daemon ($tms ms) left the listeners stranded: want them on $to only: $(cmid_line nvmet_rdma $A 4420) / $(cmid_line ib_isert $A 3260); trigger said: $(grep -o 'msg=[^ ]*' "$W/trigger.out" | sort | uniq -c | tr '\n' ' ')"
	log "trigger without a daemon: re-bound the stranded listeners onto $to in $tms ms (the kernel's 5 s grace waited out)"
done
ok=
for i in 1 2 3 4 5; do discover $A 4420 $NQN && ok=1 && break; sleep 1; done
[ -n "$ok" ] || fail "kernel fact: discover does not work again once the address is back on veth0"

# ---- the daemon re-binds a stranded listener where the address is ----
need_daemon
write_config
daemon_start || fail "daemon did not start"
status_expect before nvmet 1 state=listening rdma_device=rxe0 rdma_port=1
status_expect before lio "$LIOID" state=listening rdma_device=rxe0 rdma_port=1
check_rc || fail "check exits $? before the move (want 0)"
from=veth0
for to in veth2 veth0; do
	dev=$(dev_of $to)
	must move_addr $A/24 $from $to
	t0=$(now)
	seen=
	i=0
	while ! only_on "$dev"; do
		[ $i -ge 60 ] && fail "$from -> $to: the listeners are not on $dev (only) 12 s after the move (stranded seen: ${seen:-no}; status: $(status_of nvmet 1))"
		if [ -z "$seen" ] && l=$(status_of nvmet 1) && [ "$(status_field "$l" state)" = stranded ]; then
			seen=$(e2eutil since "$t0")
			log "$from -> $to: status says stranded after $seen ms: $l"
			echo "$l" | grep -q 'reason="stranded' || fail "$from -> $to: a stranded listener's reason does not start with 'stranded': $l"
		fi
		sleep 0.2
		i=$((i + 1))
	done
	ms=$(e2eutil since "$t0")
	log "$from -> $to: both listen on $dev only, ${ms} ms after the move (stranded seen: ${seen:-no})"
	metric "move_heal_ms_to_$dev=$ms"
	[ -n "$seen" ] || log "$from -> $to: never saw state=stranded (healed between two polls)"
	discover $A 4420 $NQN || fail "$from -> $to: discover fails after the re-bind"
	nvmet_linked 1 $NQN || fail "$from -> $to: the subsystem link is missing after the re-bind"
	[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "$from -> $to: iser is not 1 after the re-bind"
	status_expect "after $to" nvmet 1 state=listening rdma_device=$dev rdma_port=1
	status_expect "after $to" lio "$LIOID" state=listening rdma_device=$dev rdma_port=1
	check_rc || fail "$from -> $to: check exits $? after the re-bind (want 0)"
	from=$to
done
daemon_stop

# ---- pin_device = true: reported, left alone ----
PIN_DEVICE=true write_config
daemon_start || fail "daemon (pin_device=true) did not start"
status_expect pinned nvmet 1 state=listening rdma_device=rxe0
e0=$(port_enables 1)
c0=$(cmid_line ib_isert $A 3260)
must move_addr $A/24 veth0 veth2
sleep 10
status_expect "pinned, moved" nvmet 1 state=stranded rdma_device=rxe1
status_expect "pinned, moved" lio "$LIOID" state=stranded rdma_device=rxe1
status_of nvmet 1 | grep -q 'reason="stranded' || fail "pinned: the reason does not start with 'stranded': $(status_of nvmet 1)"
only_on rxe0 || fail "pinned: the listeners were moved off rxe0 although pin_device = true"
[ "$(port_enables 1)" = "$e0" ] || fail "pinned: port 1 was re-enabled although pin_device = true"
[ "$(cmid_line ib_isert $A 3260)" = "$c0" ] || fail "pinned: the iSER listener was re-created although pin_device = true"
check_rc
rc=$?
[ $rc = 2 ] || fail "pinned: check exits $rc while the listeners are stranded past the grace (want 2, CRITICAL)"
must move_addr $A/24 veth2 veth0
wait_carrier $A rxe0/1 5 || fail "pinned: the GID of $A did not come back to rxe0/1"
i=0
until l=$(status_of nvmet 1) && [ "$(status_field "$l" state)" = listening ]; do
	[ $i -ge 25 ] && fail "pinned: status is not listening 5 s after the address came back: $l"
	sleep 0.2
	i=$((i + 1))
done
check_rc || fail "pinned: check exits $? once the address is back (want 0)"
discover $A 4420 $NQN || fail "pinned: discover fails once the address is back"
[ "$(port_enables 1)" = "$e0" ] || fail "pinned: port 1 was re-enabled"
daemon_alive || fail "the daemon died"
daemon_stop
pass "stranded on this kernel (LISTEN stays on rxe0, discover fails); re-bound to the carrier in $ms ms; pinned: reported, left alone, check 2"
