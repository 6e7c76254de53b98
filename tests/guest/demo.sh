# The demo (e2e.mode=demo): tells the story of a device reset in plain
# words, with timings. Lines starting with "DEMO" are shown to the user.
E2E_NAME=demo
. /e2e/lib.sh
NQN=nqn.2024-01.io.example:demo
IQN=iqn.2024-01.io.example:demo
A=192.0.2.1

say() { echo "DEMO $*"; }
shown() { sed 's/^/DEMO     /'; }
step() { echo "DEMO"; echo "DEMO == $* =="; }
# Overrides of lib.sh's verdict helpers: a demo failure says so in words.
fail() {
	say "!! $*"
	dump_state
	_result FAIL "$*"
	exit 1
}
listeners() {
	_l=$(rdma resource show cm_id 2>&1 | grep LISTEN)
	if [ -n "$_l" ]; then echo "$_l" | shown; else say "    (no RDMA listener at all)"; fi
}

step "A storage target on soft-RoCE"
say "veth0 holds $A; the RDMA device rxe0 (soft-RoCE) sits on it."
veth veth0 veth1 && addr veth0 $A/24 && rxe_add rxe0 veth0 || fail "network setup"
say "nvmet exports $NQN on port 1 = $A:4420 (RDMA);"
say "LIO exports $IQN on the iSCSI portal $A:3260 with iser=1."
nvmet_subsys $NQN && nvmet_port 1 $A 4420 && nvmet_link 1 $NQN || fail "nvmet setup"
lio_target $IQN && lio_portal $IQN $A 3260 || fail "LIO setup"
say "The kernel's RDMA listeners (rdma resource show cm_id):"
listeners
discover $A 4420 $NQN || fail "discover on the fresh target"
say "nvme discover -t rdma -a $A -s 4420 finds $NQN."

step "Starting nvmet-rebind"
write_config 10m 192.0.2.0/24
say "config: watch 192.0.2.0/24, give up after 10m."
daemon_start || fail "daemon start"
say "nvmet-rebind runs (pid $DAEMON_PID)."

step "The NIC resets: rdma link delete rxe0"
rdma_del rxe0 || fail "rdma link delete"
wait_gone nvmet_rdma $A 4420 5
say "Listeners now:"
listeners
say "Yet configfs still looks configured:"
say "    nvmet/ports/1/subsystems/: $(ls $N/ports/1/subsystems)"
say "    target/iscsi/$IQN/tpgt_1/np/$A:3260/iser = $(lio_iser $IQN $A 3260)"
if discover $A 4420 >/dev/null 2>&1; then say "    (discover unexpectedly works)"; else say "nvme discover fails: the target is unreachable."; fi
sleep 1

step "The device comes back: rdma link add rxe0 type rxe netdev veth0"
t0=$(now)
rxe_add rxe0 veth0 || fail "rdma link add"
say "On its own the kernel would never listen again on $A (it only re-listens on wildcard addresses)."
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "nvmet-rebind did not bring port 1 back within 20 s"
ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "nvmet-rebind did not bring the iSER portal back within 20 s"
say "nvmet-rebind brought port 1 back:  LISTEN ${ms} ms after rdma link add."
say "nvmet-rebind brought the iSER portal back: LISTEN ${ms2} ms after rdma link add."
echo "E2E METRIC demo nvmet_heal_ms=$ms"
echo "E2E METRIC demo lio_heal_ms=$ms2"
say "Listeners now:"
listeners
say "What the daemon logged:"
grep -E 'level=(INFO|WARN|ERROR)' "$W/daemon.log" | grep -v 'msg=starting' | tail -n 8 | sed 's/^time=[^ ]* //' | cut -c1-220 | shown
t1=$(now)
discover $A 4420 $NQN || fail "discover after the heal"
say "nvme discover works again ($(e2eutil since "$t1") ms) and lists $NQN."

step "For comparison, the same reset without nvmet-rebind"
daemon_stop
rdma_del rxe0 && wait_gone nvmet_rdma $A 4420 5
rxe_add rxe0 veth0 || fail "rdma link add"
if ms3=$(wait_listen nvmet_rdma $A 4420 5); then
	say "Surprise: the kernel re-listened by itself after ${ms3} ms."
else
	say "Waited 5 s after rdma link add: still no listener on $A:4420 — the target stays dead."
fi
step "Done"
say "With nvmet-rebind: back in ${ms} ms (nvmet) and ${ms2} ms (iSER). Without it: never."
_result PASS "healed in ${ms} ms (nvmet), ${ms2} ms (iSER)"
