# flapping-shared: the flapping scenario on a production layout — rxe0 on
# veth0 with the storage addresses on veth0 itself and on a VLAN above it
# (veth0.100, bound through rxe0's GID table); 8 nvmet ports on 8 addresses
# (4 on each netdev, two subsystems between them), 4 LIO targets sharing one
# iSER portal 192.0.2.1:3260 and 2 sharing 198.51.100.1:3260 on the VLAN.
# rxe0 is deleted and re-added 20 times back to back. Afterwards every port
# and both shared portals LISTEN again, every link is in place and every
# sharer reads iser=1, and a host discovers through a VLAN port. With
# several endpoints healed in the same rounds, one whose backoff runs out
# while another heals is the case BUG-4 (RELIABILITY §3) left for 30 s.
NQA=nqn.2024-01.io.e2e:flapsh-a
NQB=nqn.2024-01.io.e2e:flapsh-b
FLAPS=20
need_daemon

must veth veth0 veth1
must ip link add link veth0 name veth0.100 type vlan id 100
must ip link set veth0.100 up
must ip link add link veth1 name veth1.100 type vlan id 100
must ip link set veth1.100 up
must rxe_add rxe0 veth0
must nvmet_subsys $NQA /dev/nullb0
must nvmet_subsys $NQB /dev/nullb1
PORTS=
i=1
while [ $i -le 4 ]; do
	must addr veth0 192.0.2.$i/24
	must addr veth0.100 198.51.100.$i/24
	PORTS="$PORTS $i:192.0.2.$i $((i + 4)):198.51.100.$i"
	i=$((i + 1))
done
for p in $PORTS; do
	id=${p%%:*}
	must nvmet_port "$id" "${p#*:}" 4420
	must nvmet_link "$id" $NQA
	[ $((id % 2)) -eq 1 ] || must nvmet_link "$id" $NQB
done
SHARERS=
for t in a b c d; do
	must lio_target iqn.2024-01.io.e2e:flapsh-$t
	must lio_portal iqn.2024-01.io.e2e:flapsh-$t 192.0.2.1 3260
	SHARERS="$SHARERS iqn.2024-01.io.e2e:flapsh-$t:192.0.2.1"
done
for t in e f; do
	must lio_target iqn.2024-01.io.e2e:flapsh-$t
	must lio_portal iqn.2024-01.io.e2e:flapsh-$t 198.51.100.1 3260
	SHARERS="$SHARERS iqn.2024-01.io.e2e:flapsh-$t:198.51.100.1"
done
for p in $PORTS; do
	wait_listen nvmet_rdma "${p#*:}" 4420 10 >/dev/null || fail "port $p not listening before the flaps"
done
write_config
daemon_start || fail "daemon did not start"
t0=$(now)
flap_rxe $FLAPS
tadd=$(now)
log "$FLAPS flaps done; waiting for 8 ports and 2 shared portals"
worst=0
for p in $PORTS; do
	ms=$(wait_listen nvmet_rdma "${p#*:}" 4420 30 "$tadd") || fail "port $p not listening 30 s after the last of $FLAPS flaps"
	ms=${ms%.*}
	[ "$ms" -le $worst ] || worst=$ms
done
for a in 192.0.2.1 198.51.100.1; do
	ms=$(wait_listen ib_isert $a 3260 30 "$tadd") || fail "shared portal $a:3260 not listening 30 s after the last of $FLAPS flaps"
	ms=${ms%.*}
	[ "$ms" -le $worst ] || worst=$ms
done
for p in $PORTS; do
	id=${p%%:*}
	nvmet_linked "$id" $NQA || fail "port $id lost $NQA"
	[ $((id % 2)) -eq 1 ] || nvmet_linked "$id" $NQB || fail "port $id lost $NQB"
	[ $((id % 2)) -eq 0 ] || ! nvmet_linked "$id" $NQB || fail "port $id gained $NQB"
done
for s in $SHARERS; do
	a=${s##*:}
	q=${s%:*}
	[ "$(lio_iser "$q" "$a" 3260)" = 1 ] || fail "sharer $q of $a:3260 reads iser=$(lio_iser "$q" "$a" 3260)"
done
discover 198.51.100.2 4420 $NQB || fail "discover through the VLAN port 198.51.100.2 fails after flapping"
rebinds=$(grep -c 'msg="listener restored"' "$W/daemon.log")
metric "flap_wall_ms=$(( ($(now) - t0) / 1000 ))"
metric "last_listening_after_last_add_ms=$worst"
metric "rebinds=$rebinds"
daemon_alive || fail "the daemon died"
daemon_stop
pass "$FLAPS flaps, 8 ports (4 on a VLAN) and 6 sharers of 2 portals: all listening ${worst} ms after the last add at the latest, $rebinds rebinds"
