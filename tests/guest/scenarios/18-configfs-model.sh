# configfs-model: the daemon's inotify model of the real configfs. The
# daemon starts on an empty configfs; the admin then creates a subsystem, a
# port with its link and a target with an iSER portal, then 32 more ports
# and 32 targets sharing another iSER portal (directories the model must
# start watching as they appear), changes a link, and a reset heals all 35
# listeners. Then nvmet's tree vanishes and comes back without any
# inotify event (every nvmet object removed, `modprobe -r nvmet-rdma
# nvmet`, `modprobe nvmet`, objects recreated): the model notices (module
# uevent, directory identity) and the next reset heals the new port. After
# each part a reload rescans configfs and compares it with the model: the
# daemon's debug log must never show a disagreement.
NQN=nqn.2024-01.io.e2e:model
NQN2=nqn.2024-01.io.e2e:model2
IQN=iqn.2024-01.io.e2e:model
A=192.0.2.1
need_daemon

reset_and_wait() {
	must rdma_del rxe0
	wait_gone nvmet_rdma $A 4420 5 || fail "$1: listener survived rdma link delete"
	sleep 1
	t0=$(now)
	must rxe_add rxe0 veth0
	ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "$1: port 1 not listening 20 s after rdma link add"
	[ -z "$2" ] || ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "$1: portal not listening 20 s after rdma link add"
}

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
write_config
daemon_start || fail "daemon did not start"
grep -q 'configfs_model=true' "$W/daemon.log" || fail "the daemon does not use the model: $(grep starting "$W/daemon.log")"
# Created after the daemon started.
must nvmet_subsys $NQN
must nvmet_subsys $NQN2
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
must lio_target $IQN
must lio_portal $IQN $A 3260
# An admin change: the port now exports the second subsystem too.
must nvmet_link 1 $NQN2
# And at some scale: 32 more ports and 32 targets sharing one iSER portal,
# all created while the daemon runs (hundreds of new watched directories).
i=1
while [ $i -le 32 ]; do
	nvmet_port $((100 + i)) $A $((4420 + i)) && nvmet_link $((100 + i)) $NQN || fail "setup: port $((100 + i))"
	q=iqn.2024-01.io.e2e:model-$i
	mkdir -p "$T/iscsi/$q/tpgt_1/np/$A:3261" && echo 1 >"$T/iscsi/$q/tpgt_1/np/$A:3261/iser" || fail "setup: target $q"
	i=$((i + 1))
done
nlisten() { rdma resource show cm_id 2>/dev/null | grep -c 'state LISTEN'; }
[ "$(nlisten)" = 35 ] || fail "setup: $(nlisten) LISTEN, want 35 (33 ports, 2 iSER listeners)"
listening nvmet_rdma $A 4420 rxe0 || fail "port 1 does not listen at setup"
reset_and_wait "objects created after start" lio
i=0
until [ "$(nlisten)" = 35 ]; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "objects created after start: $(nlisten) of 35 listening 20 s after the reset"
	sleep 0.1
done
nvmet_linked 1 $NQN && nvmet_linked 1 $NQN2 || fail "a link is missing after the heal: $(links_order 1)"
log "objects created after start: nvmet ${ms} ms, iSER ${ms2} ms"
# A reload rescans configfs and compares it with the model: the model must
# agree with the real configfs after all of the above.
# The daemon may still be writing the other sharers' iser after the
# LISTEN (a rescan then rebuilds without a check: "iser writes in
# flight"): reload until a rescan checks, at most 10 times.
i=0
while :; do
	must rb reload
	grep -q 'msg="configfs rescanned" why=requested model=agrees' "$W/daemon.log" && break
	i=$((i + 1))
	[ $i -lt 10 ] || fail "no reload checked configfs against the model in 10 tries: $(grep 'configfs rescanned' "$W/daemon.log" | tail -n 3 | tr '\n' ' ')"
	sleep 1
done
grep -q 'disagreed' "$W/daemon.log" && fail "the model disagreed with the rescan after objects created after start: $(grep disagreed "$W/daemon.log" | head -n 3)"
metric "heal_ms=$ms"

# nvmet's tree goes and comes back: no inotify event reports it.
i=1
while [ $i -le 32 ]; do
	nvmet_unlink $((100 + i)) $NQN && rmdir "$N/ports/$((100 + i))" || fail "teardown: port $((100 + i))"
	i=$((i + 1))
done
must nvmet_unlink 1 $NQN
must nvmet_unlink 1 $NQN2
must rmdir "$N/ports/1"
must rmdir "$N/subsystems/$NQN/namespaces/1"
must rmdir "$N/subsystems/$NQN"
must rmdir "$N/subsystems/$NQN2/namespaces/1"
must rmdir "$N/subsystems/$NQN2"
if run modprobe -r nvmet-rdma nvmet; then
	[ -d "$N" ] && fail "$N still there after modprobe -r nvmet"
	must modprobe nvmet
	must modprobe nvmet-rdma
	reloaded=yes
else
	warn "nvmet could not be unloaded here (in use); the tree was only emptied"
	reloaded=no
fi
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQN
listening nvmet_rdma $A 4420 rxe0 || fail "the new port 1 does not listen"
reset_and_wait "after nvmet reloaded" lio
metric "heal_after_reload_ms=$ms"
n0=$(grep -c 'msg="configfs rescanned" why=requested' "$W/daemon.log")
must rb reload
[ "$(grep -c 'msg="configfs rescanned" why=requested' "$W/daemon.log")" -gt "$n0" ] || fail "the second reload did not rescan configfs"
grep -q 'disagreed' "$W/daemon.log" && fail "the model disagreed with a rescan: $(grep disagreed "$W/daemon.log" | head -n 3)"
if [ $reloaded = yes ]; then
	# The module uevents reach the daemon, which invalidates its model.
	grep -q 'reason="module remove nvmet".*configfs=true' "$W/daemon.log" || fail "no 'module remove nvmet' uevent in the daemon's log"
	grep -q 'reason="module add nvmet".*configfs=true' "$W/daemon.log" || fail "no 'module add nvmet' uevent in the daemon's log"
fi
daemon_alive || fail "the daemon died"
daemon_stop
pass "35 listeners of objects created after start healed; nvmet reloaded=$reloaded and the new port healed (${ms} ms); no model/rescan disagreement"
