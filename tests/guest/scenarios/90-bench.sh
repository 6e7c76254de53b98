# bench (only with NVMET_REBIND_E2E_BENCH=N): N resets each for an nvmet port
# and an iSER portal; time from `rdma link add` to LISTEN with the daemon,
# then the floor: a script doing the relink (unlink+ln -s, iser 0/1) right
# after `rdma link add`, in the same VM (daemon, script, daemon: see
# below). Prints median and max; for each
# daemon reset, how long `rdma link add` took and the daemon's events and
# acting round (debug log: observe, plan, act_and_verify, ...).
NQN=nqn.2024-01.io.e2e:bench
IQN=iqn.2024-01.io.e2e:bench
A=192.0.2.1
R=${E2E_BENCH:-0}
[ "$R" -gt 0 ] || skip "NVMET_REBIND_E2E_BENCH not set"
need_daemon

target_pair $A $NQN $IQN

LINK=$N/ports/1/subsystems/$NQN
ISER=$T/iscsi/$IQN/tpgt_1/np/$A:3260/iser
one() { # MODE: daemon | script
	l0=$(wc -l <"$W/daemon.log")
	rdma_del rxe0 || fail "rdma link delete"
	wait_gone nvmet_rdma $A 4420 5 || fail "listener survived"
	sleep 0.5
	t0=$(now)
	rxe_add rxe0 veth0 || fail "rdma link add"
	t1=$(now)
	if [ "$1" = script ]; then
		# nvmet in the background (rm and ln are programs), LIO with shell
		# builtins only: both start right after rdma link add returns.
		(rm "$LINK" && ln -s "$N/subsystems/$NQN" "$LINK") &
		echo 0 >"$ISER"
		echo 1 >"$ISER"
		wait
	fi
	n=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "$1: nvmet not healed"
	l=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "$1: lio not healed"
	echo "$n" >>"$W/$1.nvmet"
	echo "$l" >>"$W/$1.lio"
	# both: until the port and the portal both listen (what a host using
	# either waits for at most).
	if [ "${n%.*}" -ge "${l%.*}" ]; then echo "$n"; else echo "$l"; fi >>"$W/$1.both"
	log "$1: nvmet $n ms, lio $l ms (t0 $t0 us, rdma link add $(((t1 - t0) / 1000)) ms)"
	if [ "$1" = daemon ]; then
		# Where the daemon's time went: its events and the rounds that
		# acted (debug log: observe, plan, act_and_verify, ...).
		tail -n +"$((l0 + 1))" "$W/daemon.log" | grep 'msg=event\|msg=round\|msg=heal' | head -n 16 | while read -r line; do log "  $line"; done
	fi
}
# Order: half the daemon's resets, the script's, the daemon's other half
# (ABBA): load that drifts during the run (TCG on shared cores: `rdma link
# add` alone took 2x longer in the first daemon resets of one run than in
# the script's) lands on both sides, not on whichever ran first.
write_config
daemon_start || fail "daemon did not start"
i=0
while [ $i -lt $((R / 2)) ]; do one daemon; i=$((i + 1)); done
daemon_stop
i=0
while [ $i -lt "$R" ]; do one script; i=$((i + 1)); done
daemon_start || fail "daemon did not start again"
while [ $i -lt $((R + R - R / 2)) ]; do one daemon; i=$((i + 1)); done
daemon_stop
for m in daemon script; do
	for k in nvmet lio both; do
		s=$(e2eutil stats $(cat "$W/$m.$k"))
		log "$m $k: $s"
		for kv in $s; do metric "${m}_${k}_$kv"; done
	done
done
pass "$R resets each: daemon nvmet $(e2eutil stats $(cat $W/daemon.nvmet) | cut -d' ' -f2-3), both $(e2eutil stats $(cat $W/daemon.both) | cut -d' ' -f2-3); floor nvmet $(e2eutil stats $(cat $W/script.nvmet) | cut -d' ' -f2-3), both $(e2eutil stats $(cat $W/script.both) | cut -d' ' -f2-3)"
