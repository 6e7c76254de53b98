# cinder-nvmet: the layout of OpenStack Cinder's nvmet target
# (cinder/volume/targets/nvmet.py, target_secondary_ip_addresses): one nvmet
# port per target address (nvmet_port_id, nvmet_port_id+1, …) and every
# volume's subsystem linked into every port — many subsystems per port, the
# same subsystem on ports of two RDMA devices (multipath).
# Port 1 on 192.0.2.1:4420 (rxe0/veth0), port 2 on 198.51.100.1:4420
# (rxe1/veth2), 12 subsystems in both (more than the configfs model keeps
# in a list: each port's subsystems/ is a directory it indexes by name, as
# at a thousand); a host connected to volume 1 through
# port 2. rxe0 reset → port 1 listens again with all 12 links in their
# original configfs order, discover on port 1 lists all 12, a host connects to
# volume 2 through port 1 (I/O); port 2 is never re-enabled and the host's
# controller through rxe1 stays live with the same cntlid (no new
# controller). Metric heal_ms.
A=192.0.2.1
B=198.51.100.1
VOLS="1 2 3 4 5 6 7 8 9 10 11 12"
NV=12
nqn() { echo "nqn.2024-01.io.e2e:cinder-volume-$1"; }

must veth veth0 veth1
must veth veth2 veth3
must addr veth0 $A/24
must addr veth2 $B/24
must rxe_add rxe0 veth0
must rxe_add rxe1 veth2
must nvmet_port 1 $A 4420
must nvmet_port 2 $B 4420
for v in $VOLS; do
	# Subsystems may share a backing device (nvmet opens it non-exclusively).
	must nvmet_subsys "$(nqn $v)" /dev/nullb$((v % 4))
	must nvmet_link 1 "$(nqn $v)"
	must nvmet_link 2 "$(nqn $v)"
done
listening nvmet_rdma $A 4420 rxe0 || fail "port 1 does not listen on rxe0"
listening nvmet_rdma $B 4420 rxe1 || fail "port 2 does not listen on rxe1"
order=$(links_order 1)
log "port 1 links: $order"
host_connect $B 4420 "$(nqn 1)" || fail "nvme connect to volume 1 through port 2 fails"
ctrl=$CTRL
cntlid=$(cat /sys/class/nvme/$ctrl/cntlid)
log "host: $ctrl (volume 1 via $B, cntlid $cntlid)"

need_daemon
write_config
daemon_start || fail "daemon did not start"
c0=$(ctrl_count)
e2=$(port_enables 2)

must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "listener survived rdma link delete"
sleep 1
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "port 1 not listening 20 s after rdma link add"
log "port 1: LISTEN ${ms} ms after rdma link add"
metric "heal_ms=$ms"
listening nvmet_rdma $A 4420 rxe0 || fail "port 1 listens, but not on rxe0"
[ "$(links_order 1)" = "$order" ] || fail "port 1's links changed: '$order' -> '$(links_order 1)'"
sleep 2
# Before any discover of ours (a discovery controller counts too).
[ "$(ctrl_count)" = "$c0" ] || fail "a controller was created on the target during the heal ($c0 -> $(ctrl_count))"
[ "$(cat /sys/class/nvme/$ctrl/state)" = live ] || fail "$ctrl (via port 2) is $(cat /sys/class/nvme/$ctrl/state), not live"
[ "$(cat /sys/class/nvme/$ctrl/cntlid)" = "$cntlid" ] || fail "$ctrl has a new cntlid (it reconnected)"
[ "$(port_enables 2)" = "$e2" ] || fail "port 2 (rxe1) was re-enabled"
listening nvmet_rdma $B 4420 rxe1 || fail "port 2 no longer listens on rxe1"
must nvme discover -t rdma -a $A -s 4420
n=$(grep -c "subnqn: *nqn.2024-01.io.e2e:cinder-volume-" "$W/run.out")
[ "$n" = $NV ] || fail "discover on port 1 lists $n of the $NV volumes"
CTRL=$ctrl
host_io || fail "I/O through port 2 fails"
host_connect $A 4420 "$(nqn 2)" || fail "nvme connect to volume 2 through the healed port 1 fails"
host_io || fail "I/O on volume 2 through port 1 fails"
host_disconnect "$(nqn 2)" || fail "nvme disconnect of volume 2 fails"
daemon_alive || fail "the daemon died"
daemon_stop
pass "port 1 ($NV subsystems) healed in ${ms} ms, links in order, $NV volumes discovered, connect works; port 2's controller $ctrl untouched"
