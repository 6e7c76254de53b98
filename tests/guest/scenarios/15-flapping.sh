# flapping: rxe0 is deleted and re-added 20 times back to back, without
# waiting for the daemon in between (a flapping link or a driver that resets
# repeatedly). The daemon must end with both listeners in LISTEN, the links
# and iser as the admin left them, and no growth of its threads or open fds.
NQN=nqn.2024-01.io.e2e:flap
IQN=iqn.2024-01.io.e2e:flap
A=192.0.2.1
FLAPS=${FLAPS:-20}
need_daemon

target_pair $A $NQN $IQN
write_config
daemon_start || fail "daemon did not start"
fds() { ls /proc/$DAEMON_PID/fd | wc -l; }
threads() { ls /proc/$DAEMON_PID/task | wc -l; }
fd0=$(fds)
th0=$(threads)
t0=$(now)
flap_rxe $FLAPS
tadd=$(now)
log "$FLAPS flaps done; waiting for the listeners"
ms=$(wait_listen nvmet_rdma $A 4420 30 "$tadd") || fail "port not listening 30 s after the last of $FLAPS flaps"
ms2=$(wait_listen ib_isert $A 3260 30 "$tadd") || fail "portal not listening 30 s after the last of $FLAPS flaps"
log "listening: nvmet ${ms} ms, LIO ${ms2} ms after the last add"
nvmet_linked 1 $NQN || fail "link missing after flapping"
[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "iser not 1 after flapping"
discover $A 4420 $NQN || fail "discover fails after flapping"
sleep 2
fd1=$(fds)
th1=$(threads)
log "$FLAPS flaps in $(( ($tadd - $t0) / 1000 )) ms; healed ${ms} ms (nvmet) / ${ms2} ms (LIO) after the last add; fds $fd0 -> $fd1, threads $th0 -> $th1"
metric "flaps=$FLAPS"
metric "flap_wall_ms=$(( ($tadd - $t0) / 1000 ))"
metric "heal_after_last_ms=$ms"
metric "fds_before=$fd0"
metric "fds_after=$fd1"
metric "threads_before=$th0"
metric "threads_after=$th1"
[ "$fd1" -le $((fd0 + 2)) ] || fail "open fds grew from $fd0 to $fd1"
rebinds=$(grep -c 'msg="listener restored"' "$W/daemon.log")
metric "rebinds=$rebinds"
daemon_alive || fail "the daemon died"
daemon_stop
pass "$FLAPS flaps: healed ${ms}/${ms2} ms after the last add, $rebinds rebinds, fds $fd0->$fd1, threads $th0->$th1"
