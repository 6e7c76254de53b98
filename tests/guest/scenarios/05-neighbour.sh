# neighbour: rxe0 on veth0 and rxe1 on veth2; a host connected with
# `nvme connect` to the port on rxe1. Resetting rxe0 heals the rxe0 port and
# leaves the rxe1 controller alone: no new controller, same controller
# device, still live, I/O still works.
NQA=nqn.2024-01.io.e2e:nb-a
NQB=nqn.2024-01.io.e2e:nb-b
A=192.0.2.1
B=198.51.100.1
need_daemon

must veth veth0 veth1
must veth veth2 veth3
must addr veth0 $A/24
must addr veth2 $B/24
must rxe_add rxe0 veth0
must rxe_add rxe1 veth2
must nvmet_subsys $NQA /dev/nullb0
must nvmet_subsys $NQB /dev/nullb1
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQA
must nvmet_port 2 $B 4420
must nvmet_link 2 $NQB
listening nvmet_rdma $A 4420 rxe0 || fail "port 1 does not listen on rxe0"
listening nvmet_rdma $B 4420 rxe1 || fail "port 2 does not listen on rxe1"
must nvme connect -t rdma -a $B -s 4420 -n $NQB
ctrl=
for i in $(seq 50); do
	for c in /sys/class/nvme/nvme*; do
		[ -e "$c/subsysnqn" ] && [ "$(cat $c/subsysnqn)" = $NQB ] && ctrl=$(basename $c)
	done
	[ -n "$ctrl" ] && [ -b /dev/${ctrl}n1 ] && break
	sleep 0.1
done
[ -n "$ctrl" ] && [ -b /dev/${ctrl}n1 ] || fail "no namespace block device after nvme connect"
log "host connected: $ctrl ($(cat /sys/class/nvme/$ctrl/state)), /dev/${ctrl}n1"
must dd if=/dev/${ctrl}n1 of=/dev/null bs=64k count=16
write_config
daemon_start || fail "daemon did not start"
c0=$(ctrl_count)
e0=$(port_enables 2)
cntlid=$(cat /sys/class/nvme/$ctrl/cntlid)

must rdma_del rxe0
wait_gone nvmet_rdma $A 4420 5 || fail "rxe0 listener survived rdma link delete"
sleep 1
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "port 1 not listening 20 s after rdma link add"
metric "heal_ms=$ms"
sleep 2
[ "$(cat /sys/class/nvme/$ctrl/state)" = live ] || fail "$ctrl is $(cat /sys/class/nvme/$ctrl/state), not live"
[ "$(cat /sys/class/nvme/$ctrl/cntlid)" = "$cntlid" ] || fail "$ctrl has a new cntlid (reconnected)"
[ "$(ctrl_count)" = "$c0" ] || fail "a new controller was created on the target ($c0 -> $(ctrl_count))"
[ "$(port_enables 2)" = "$e0" ] || fail "port 2 was re-enabled (disturbed)"
listening nvmet_rdma $B 4420 rxe1 || fail "port 2 no longer listens on rxe1"
must dd if=/dev/${ctrl}n1 of=/dev/null bs=64k count=16
discover $A 4420 $NQA || fail "discover on the healed port fails"
daemon_alive || fail "the daemon died"
daemon_stop
pass "rxe0 port healed in ${ms} ms; rxe1 controller $ctrl untouched (cntlid $cntlid, live, I/O ok)"
