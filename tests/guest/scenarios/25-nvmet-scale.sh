# nvmet-scale: 256 nvmet ports (192.0.2.1:4420–4675, one subsystem linked
# into each) and 32 iSER portals (32 targets, 192.0.2.1:3260–3291) on rxe0.
# Two resets:
#  - the daemon (inotify model, metrics textfile): ms from `rdma link add`
#    to the first LISTEN and to all 288 (daemon_first_ms, daemon_all_ms);
#    from its metrics, the time inside configfs writes (the kernel binding
#    listeners) and its share of daemon_all_ms (kernel_share);
#  - no daemon, a script started right after `rdma link add` that unlinks
#    and relinks every port and writes iser 0 then 1 on every portal
#    (shell builtins): script_first_ms, script_all_ms.
NP=256
NL=32
A=192.0.2.1
NQN=nqn.2024-01.io.e2e:scale
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
must nvmet_subsys $NQN
t0=$(now)
i=0
while [ $i -lt $NP ]; do
	nvmet_port $((i + 1)) $A $((4420 + i)) || fail "setup: port $((i + 1))"
	nvmet_link $((i + 1)) $NQN || fail "setup: link of port $((i + 1))"
	i=$((i + 1))
done
Q=
i=0
while [ $i -lt $NL ]; do
	q=iqn.2024-01.io.e2e:scale-$i
	mkdir -p "$T/iscsi/$q/tpgt_1/np/$A:$((3260 + i))" && echo 1 >"$T/iscsi/$q/tpgt_1/np/$A:$((3260 + i))/iser" || fail "setup: portal $i"
	Q="$Q $q"
	i=$((i + 1))
done
metric "setup_ms=$(e2eutil since "$t0")"
TOTAL=$((NP + NL))
nlisten() { rdma resource show cm_id 2>/dev/null | grep -c 'state LISTEN'; }
[ "$(nlisten)" = $TOTAL ] || fail "setup: $(nlisten) LISTEN, want $TOTAL"

# wait_all T0: wait until TOTAL listeners are back; prints "first all" ms,
# by the cm_id poll of wait_listen (RDMA netlink, rdma confirms).
wait_all() {
	_r=$(e2eutil wait-count -n $TOTAL -since "$1" -timeout 60s) || fail "$2: ${_r#timeout } of $TOTAL listening 60+ s after rdma link add"
	echo "$_r"
}
outage() {
	must rdma_del rxe0
	_i=0
	while [ "$(nlisten)" != 0 ]; do
		_i=$((_i + 1))
		[ $_i -lt 200 ] || fail "$1: listeners survived rdma link delete"
		sleep 0.05
	done
	sleep 0.5
}
metric_value() { sed -n "s/^$1 //p" "$W/m.prom" | tail -n 1; }

# ---- the daemon ----
write_config
DAEMON_ARGS="--metrics-textfile $W/m.prom" daemon_start || fail "daemon did not start"
sleep 1
outage daemon
r0=$(metric_value nvmet_rebind_reconcile_seconds_total)
w0=$(metric_value nvmet_rebind_configfs_write_seconds_total)
l0=$(wc -l <"$W/daemon.log")
t0=$(now)
must rxe_add rxe0 veth0
set -- $(wait_all "$t0" daemon)
df=$1
da=$2
sleep 4 # the round and its verification end; the textfile is rewritten
r1=$(metric_value nvmet_rebind_reconcile_seconds_total)
w1=$(metric_value nvmet_rebind_configfs_write_seconds_total)
# The kernel's share: time inside configfs writes over the daemon's time
# from `rdma link add` to all listening (the rest: noticing the device,
# observing, planning, journaling). Reconcile time counts every round of
# those 4 s, the rechecks after the event included.
set -- $(awk -v r0="$r0" -v r1="$r1" -v w0="$w0" -v w1="$w1" -v da="$da" 'BEGIN { printf "%.0f %.0f %.2f", (r1 - r0) * 1000, (w1 - w0) * 1000, (w1 - w0) * 1000 / da }')
rms=$1
wms=$2
share=$3
metric "daemon_first_ms=$df"
metric "daemon_all_ms=$da"
metric "daemon_reconcile_ms=$rms"
metric "daemon_write_ms=$wms"
metric "kernel_share=$share"
log "daemon: first LISTEN $df ms, all $TOTAL $da ms; $wms ms of it inside configfs writes (share $share); $rms ms reconciling in those 4 s"
# Where the daemon's time went: its events and the rounds that acted
# (debug log: observe, plan, act_and_verify, configfs_writes, journal, verify).
tail -n +"$((l0 + 1))" "$W/daemon.log" | grep 'msg=event\|msg=round' | head -n 12 | while read -r line; do log "  $line"; done
daemon_alive || fail "the daemon died"
daemon_stop

# ---- the script floor, no daemon ----
outage script
t0=$(now)
must rxe_add rxe0 veth0
(
	i=1
	while [ $i -le $NP ]; do
		rm "$N/ports/$i/subsystems/$NQN" && ln -s "$N/subsystems/$NQN" "$N/ports/$i/subsystems/$NQN" || exit 1
		i=$((i + 1))
	done
	i=0
	for q in $Q; do
		echo 0 >"$T/iscsi/$q/tpgt_1/np/$A:$((3260 + i))/iser" && echo 1 >"$T/iscsi/$q/tpgt_1/np/$A:$((3260 + i))/iser" || exit 2
		i=$((i + 1))
	done
) &
sp=$!
set -- $(wait_all "$t0" script)
sf=$1
sa=$2
wait $sp || fail "script: a write was refused (exit $?)"
metric "script_first_ms=$sf"
metric "script_all_ms=$sa"
log "script: first LISTEN $sf ms, all $TOTAL $sa ms"
pass "$NP ports + $NL portals: daemon first $df ms / all $da ms ($wms ms in configfs writes, share $share); script first $sf ms / all $sa ms"
