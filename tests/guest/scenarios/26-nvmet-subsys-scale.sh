# nvmet-subsys-scale (only with NVMET_REBIND_E2E_BENCH=N): one nvmet port,
# 192.0.2.1:4420 on rxe0, with NS=1000 subsystems linked into it (the layout
# of a target with one port per address and a subsystem per volume).
# NVMET_REBIND_E2E_BENCH=N resets of each (at least 2; an odd N is rounded
# up), in blocks daemon, script, script, daemon (R = 1 .. N), so load that
# drifts through the boot lands on both sides:
#  - the daemon: ms from `rdma link add` to LISTEN (daemon_listen_ms_R) and
#    to every link back (daemon_complete_ms_R);
#  - no daemon, the floor an admin's script reaches, started right after
#    `rdma link add`: one rm of every link, one ln -s of every subsystem
#    (two processes): script_listen_ms_R, script_complete_ms_R.
# The port listens again only once its last link is gone and one is made
# (the first link enables the port), so both unlink all NS links first.
# Both completions are measured by the same poll (every 10 ms).
# e2e-limit: 600
NS=${E2E_NS:-1000}
A=192.0.2.1
P=4420
R=${E2E_BENCH:-0}
[ "$R" -gt 0 ] || skip "NVMET_REBIND_E2E_BENCH not set"
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
must nvmet_port 1 $A $P
t0=$(now)
S=
i=1
while [ $i -le $NS ]; do
	S="$S nqn.2024-01.io.e2e:vol-$i"
	i=$((i + 1))
done
(cd "$N/subsystems" && mkdir $S) || fail "setup: mkdir of $NS subsystems failed"
for s in $S; do
	echo 1 >"$N/subsystems/$s/attr_allow_any_host" || fail "setup: $s: attr_allow_any_host"
done
PD=$N/ports/1/subsystems
(cd "$N/subsystems" && ln -s "$N/subsystems"/* "$PD/") || fail "setup: linking $NS subsystems into port 1 failed"
setup=$(e2eutil since "$t0")
metric "setup_ms=$setup"
links() { ls "$PD" | wc -l; }
[ "$(links)" = $NS ] || fail "setup: port 1 has $(links) links, want $NS"
wait_listen nvmet_rdma $A $P 10 >/dev/null || fail "port 1 ($NS subsystems) does not listen at setup"
log "$NS subsystems linked into port 1 in $setup ms"

outage() {
	must rdma_del rxe0
	wait_gone nvmet_rdma $A $P 10 || fail "$1: the listener survived rdma link delete"
	sleep 0.5
	[ "$(links)" = $NS ] || fail "$1: port 1 has $(links) links during the outage, want $NS"
}
# complete PHASE T0: wait until port 1 has every link; prints ms since T0.
# A poll every 10 ms by e2eutil (no fork a turn; the shell's `ls | wc -l`
# and `sleep 0.1` before 2026-12-07 took ~150 ms a turn under TCG, which
# quantised both arms' figures).
complete() {
	_c=$(e2eutil wait-entries -dir "$PD" -n $NS -since "$2" -timeout 60s) ||
		fail "$1: port 1 has $(links) of $NS links 60 s after rdma link add ($_c)"
	echo "$_c"
}

daemon_run() {
	write_config
	daemon_start || fail "daemon did not start"
	outage "daemon $1"
	l0=$(wc -l <"$W/daemon.log")
	up_cs u0
	t0=$(now)
	must rxe_add rxe0 veth0
	up_cs u1
	dl=$(wait_listen nvmet_rdma $A $P 30 "$t0") || fail "daemon $1: port 1 not listening 30 s after rdma link add"
	dc=$(complete "daemon $1" "$t0")
	sleep 2
	tail -n +"$((l0 + 1))" "$W/daemon.log" | grep 'msg=event\|msg=round\|msg=heal' | head -n 8 | while read -r line; do log "  $line"; done
	metric "daemon_linkadd_ms_$1=$(( (u1 - u0) * 10 ))"
	metric "daemon_listen_ms_$1=$dl"
	metric "daemon_complete_ms_$1=$dc"
	log "daemon $1: LISTEN $dl ms, every link back $dc ms after rdma link add"
	listening nvmet_rdma $A $P rxe0 || fail "daemon $1: port 1 not listening at the end"
	check_rc || fail "daemon $1: check exits $? after the heal"
	daemon_alive || fail "the daemon died"
	daemon_stop
	echo "$dl" >>"$W/daemon_listen"
	echo "$dc" >>"$W/daemon_complete"
}

script_run() {
	outage "script $1"
	up_cs u0
	t0=$(now)
	must rxe_add rxe0 veth0
	up_cs u1
	(
		rm -f "$PD"/* || exit 1
		ln -s "$N/subsystems"/* "$PD/" || exit 2
	) &
	sp=$!
	sl=$(wait_listen nvmet_rdma $A $P 30 "$t0") || fail "script $1: port 1 not listening 30 s after rdma link add"
	sc=$(complete "script $1" "$t0")
	wait $sp || fail "script $1: exit $? (1 = rm, 2 = ln)"
	metric "script_linkadd_ms_$1=$(( (u1 - u0) * 10 ))"
	metric "script_listen_ms_$1=$sl"
	metric "script_complete_ms_$1=$sc"
	log "script $1: LISTEN $sl ms, every link back $sc ms after rdma link add"
	listening nvmet_rdma $A $P rxe0 || fail "script $1: port 1 not listening at the end"
	echo "$sl" >>"$W/script_listen"
	echo "$sc" >>"$W/script_complete"
}

bench_blocks
# Medians over the runs: the boot's noise (the 1,000 unlinks alone take
# 130-380 ms from run to run under TCG) swamps any two runs.
bench_medians
pass "1 port, $NS subsystems (setup $setup ms), $BENCH_N runs each, median ms after rdma link add: LISTEN daemon $M_daemon_listen, script $M_script_listen; every link daemon $M_daemon_complete, script $M_script_complete"
