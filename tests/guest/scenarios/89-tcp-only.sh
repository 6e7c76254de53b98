# tcp-only: a target with no RDMA stack at all (and no tcp_diag) — every RDMA module unloaded
# and module autoloading off, so ib_core cannot come back (opening a
# NETLINK_RDMA socket as root would load it). The daemon runs, says once at
# info that RDMA netlink is unavailable, judges the nvmet TCP ports from the
# TCP sockets, completes the one the restore could not link when its
# address comes, and `check` is OK. The RDMA stack is loaded again after.
NQN=nqn.2024-01.io.e2e:tcponly
A=192.0.2.1
need_daemon
modprobe nvmet-tcp 2>/dev/null || skip "no nvmet-tcp module in this kernel's initramfs"
modprobe nvme-tcp 2>/dev/null || skip "no nvme-tcp module in this kernel's initramfs"
OLD_MODPROBE=$(cat /proc/sys/kernel/modprobe)
restore_rdma() {
	echo "$OLD_MODPROBE" >/proc/sys/kernel/modprobe
	load_modules >/dev/null 2>&1
}
trap restore_rdma EXIT
echo /bin/false >/proc/sys/kernel/modprobe
# unload M: M and, first, every module that holds it (the RDMA stack's
# modules differ between kernels: 7.3 has ib_uverbs_support).
unload() {
	[ -d "/sys/module/$1" ] || return 0
	for _h in /sys/module/"$1"/holders/*; do
		[ -e "$_h" ] && { unload "${_h##*/}" || return 1; }
	done
	rmmod "$1" 2>"$W/rmmod.err" || { log "rmmod $1: $(cat "$W/rmmod.err")"; return 1; }
}
# tcp_diag too: without it (and no autoloading) the daemon reads
# /proc/net/tcp instead of sock_diag, which this scenario then exercises.
for m in ib_core tcp_diag inet_diag; do
	unload $m || fail "could not unload $m and what holds it"
done
[ -d /sys/module/ib_core ] && fail "ib_core still loaded"

must ip link add dummy0 type dummy
must ip link set dummy0 up
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420 tcp
if nvmet_link 1 $NQN 2>/dev/null; then fail "link accepted with the address absent"; fi
cat >"$W/nvmet.json" <<JSON
{"hosts": [], "ports": [
 {"portid": 1, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"}, "referrals": [], "subsystems": ["$NQN"]}
], "subsystems": [{"nqn": "$NQN", "attr": {"allow_any_host": "1"}, "namespaces": [], "allowed_hosts": []}]}
JSON
write_config
printf '\n[boot]\nnvmet_config = "%s"\nwindow = "5m"\n' "$W/nvmet.json" >>"$W/config.toml"
daemon_start || fail "daemon did not start without RDMA"
t0=$(now)
must addr dummy0 $A/24
ms=$(wait_listen tcp $A 4420 20 "$t0") || fail "TCP port not listening 20 s after its address: $(rb status)"
discover $A 4420 $NQN tcp || fail "nvme discover over TCP fails"
[ -d /sys/module/ib_core ] && fail "ib_core was loaded meanwhile"
_i=0
until check_rc >/dev/null; do
	[ $_i -ge 50 ] && { check_rc; fail "check not OK on a TCP-only host with the port listening"; }
	sleep 0.1
	_i=$((_i + 1))
done
n=$(grep -c 'RDMA netlink unavailable' "$W/daemon.log")
[ "$n" = 1 ] || fail "$n 'RDMA netlink unavailable' lines in the log, want 1"
grep 'RDMA netlink unavailable' "$W/daemon.log" | grep -q 'level=INFO' || fail "the RDMA line is not at info: $(grep 'RDMA netlink unavailable' "$W/daemon.log")"
grep -q 'level=WARN\|level=ERROR' "$W/daemon.log" && log "warnings: $(grep 'level=WARN\|level=ERROR' "$W/daemon.log" | head -n 5)"
daemon_alive || fail "the daemon died"
daemon_stop
metric "tcp_ms=$ms"
pass "no RDMA stack: the TCP port completed ${ms} ms after its address came, check OK, one info line about RDMA"
