# boot-complete-scale (only with NVMET_REBIND_E2E_BENCH=N): boot completion
# of nvmetcli saved configs at two sizes, each restored by nvmetcli's
# restore (e2eutil nvmetcli-restore) that stops at its first refusal:
#  - 64 subsystems (a namespace each) linked to 8 ports (4 RDMA, 4 TCP):
#    the restore stops at port 1's first link (no RDMA device yet); the
#    daemon makes ports 2-8 at once (the TCP ones listen). Measured: from
#    `rdma link add` (the last prerequisite) to every port listening with
#    every link: last_prereq_to_all_ms.
#  - a Cinder-sized file, 1,000 subsystems with a namespace each, all
#    linked to two RDMA ports: the restore stops at the first namespace,
#    whose disk is late, so the daemon makes 999 subsystems, their
#    namespaces, both ports and 2,000 links. Measured: from the daemon's
#    start to both ports listening with every link (cinder_complete_ms),
#    then from the late disk's link to its namespace enabled.
# e2e-limit: 900
R=${E2E_BENCH:-0}
[ "$R" -gt 0 ] || skip "NVMET_REBIND_E2E_BENCH not set"
need_daemon
modprobe nvmet-tcp 2>/dev/null || skip "no nvmet-tcp module in this kernel's initramfs"
A=192.0.2.1
LATE=/dev/disk/by-id/e2e-scale-late
rm -f "$LATE"

# gen NS PORTS FIRST_DEV: a saved config of NS subsystems (vol-<i>, one
# namespace each on nullb<i%3+1>, the first one on FIRST_DEV) linked to
# every port of PORTS ("id:trtype:svc …").
gen() {
	_ns=$1 _ports=$2 _first=$3
	printf '{"hosts": [], "subsystems": [\n'
	_i=1
	while [ $_i -le "$_ns" ]; do
		_dev=/dev/nullb$((_i % 3 + 1))
		[ $_i = 1 ] && _dev=$_first
		[ $_i = 1 ] || printf ','
		printf '{"nqn": "nqn.2024-01.io.e2e:vol-%d", "attr": {"allow_any_host": "1"}, "allowed_hosts": [], "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "%s"}}]}\n' $_i "$_dev"
		_i=$((_i + 1))
	done
	printf '], "ports": [\n'
	_c=
	for _p in $_ports; do
		_id=${_p%%:*} _r=${_p#*:}
		_t=${_r%%:*} _s=${_r#*:}
		printf '%s{"portid": %s, "addr": {"adrfam": "ipv4", "traddr": "%s", "treq": "not specified", "trsvcid": "%s", "trtype": "%s"}, "ana_groups": [], "referrals": [], "subsystems": [' "$_c" "$_id" $A "$_s" "$_t"
		_i=1
		while [ $_i -le "$_ns" ]; do
			[ $_i = 1 ] || printf ','
			printf '"nqn.2024-01.io.e2e:vol-%d"' $_i
			_i=$((_i + 1))
		done
		printf ']}\n'
		_c=,
	done
	printf ']}\n'
}
# linked_all NS PORT…: every port has NS links.
linked_all() {
	_n=$1
	shift
	for _p in "$@"; do
		[ "$(ls "$N/ports/$_p/subsystems" 2>/dev/null | wc -l)" = "$_n" ] || return 1
	done
}
boot_config() {
	write_config
	printf '\n[boot]\nnvmet_config = "%s"\nwindow = "10m"\n' "$1" >>"$W/config.toml"
}

must veth veth0 veth1
must addr veth0 $A/24

# --- 64 subsystems, 8 ports ---
PORTS="1:rdma:4420 2:rdma:4421 3:rdma:4422 4:rdma:4423 5:tcp:4420 6:tcp:4421 7:tcp:4422 8:tcp:4423"
gen 64 "$PORTS" /dev/nullb0 >"$W/small.json"
if e2eutil nvmetcli-restore "$W/small.json" >"$W/restore.out" 2>&1; then fail "the 64-subsystem restore went through without RDMA"; fi
[ -d "$N/ports/2" ] && fail "the restore did not stop at port 1"
boot_config "$W/small.json"
t0=$(now)
daemon_start || fail "daemon did not start"
for s in 4420 4421 4422 4423; do
	wait_listen tcp $A $s 60 "$t0" >/dev/null || fail "TCP port on $s not listening: $(rb status | tail -n 5)"
done
ms_tcp=$(e2eutil since "$t0")
t1=$(now)
must rxe_add rxe0 veth0
for s in 4420 4421 4422 4423; do
	wait_listen nvmet_rdma $A $s 60 "$t1" >/dev/null || fail "RDMA port on $s not listening: $(rb status | tail -n 5)"
done
_i=0
until linked_all 64 1 2 3 4 5 6 7 8; do
	[ $_i -ge 600 ] && fail "not every link made 60 s after rdma link add"
	sleep 0.1
	_i=$((_i + 1))
done
ms_small=$(e2eutil since "$t1")
daemon_stop
metric "small_tcp_ports_after_start_ms=$ms_tcp"
metric "small_last_prereq_to_all_ms=$ms_small"
log "64 subsystems x 8 ports: TCP ports ${ms_tcp} ms after start; every port and link ${ms_small} ms after rdma link add"
cleanup_all >/dev/null 2>&1
rm -rf "$W/state"
must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0

# --- Cinder-sized: 1,000 subsystems, 2 ports ---
NS=${E2E_NS:-1000}
gen "$NS" "1:rdma:4420 2:rdma:4421" "$LATE" >"$W/cinder.json"
t0=$(now)
if e2eutil nvmetcli-restore "$W/cinder.json" >"$W/restore.out" 2>&1; then fail "the Cinder restore went through without its disk"; fi
log "restore stopped after $(e2eutil since "$t0") ms: $(tail -n 1 "$W/restore.out")"
[ -d "$N/subsystems/nqn.2024-01.io.e2e:vol-2" ] && fail "the restore did not stop at the first namespace"
boot_config "$W/cinder.json"
t0=$(now)
daemon_start || fail "daemon did not start"
wait_listen nvmet_rdma $A 4420 300 "$t0" >/dev/null || fail "port 1 not listening: $(rb status | tail -n 5)"
wait_listen nvmet_rdma $A 4421 300 "$t0" >/dev/null || fail "port 2 not listening: $(rb status | tail -n 5)"
_i=0
until linked_all "$NS" 1 2; do
	[ $_i -ge 3000 ] && fail "not every link made 300 s after the daemon started: $(ls "$N/ports/1/subsystems" | wc -l)/$(ls "$N/ports/2/subsystems" | wc -l)"
	sleep 0.1
	_i=$((_i + 1))
done
ms_cinder=$(e2eutil since "$t0")
[ "$(cat "$N/subsystems/nqn.2024-01.io.e2e:vol-$NS/namespaces/1/enable")" = 1 ] || fail "the last namespace is not enabled"
rb check >/dev/null 2>&1
[ $? = 1 ] || warn "check is not WARNING while the first namespace waits for its disk"
mkdir -p /dev/disk/by-id
t1=$(now)
ln -s ../../nullb0 "$LATE" || fail "ln -s $LATE"
_i=0
until [ "$(cat "$N/subsystems/nqn.2024-01.io.e2e:vol-1/namespaces/1/enable")" = 1 ]; do
	[ $_i -ge 400 ] && fail "the late namespace not enabled 20 s after its disk"
	sleep 0.05
	_i=$((_i + 1))
done
ms_disk=$(e2eutil since "$t1")
daemon_alive || fail "the daemon died"
daemon_stop
rm -f "$LATE"
metric "cinder_complete_ms=$ms_cinder"
metric "cinder_disk_to_enable_ms=$ms_disk"
pass "64x8: every port and link ${ms_small} ms after rdma link add; Cinder-sized ($NS subsystems, 2 ports): complete ${ms_cinder} ms after the daemon started, late namespace enabled ${ms_disk} ms after its disk"
