# tcp-boot: nvmetcli's restore ran before any address was up (the
# NetworkManager/bonding/DHCP boot order): two nvmet TCP ports and one RDMA
# port whose links the kernel refused (nvmet_tcp: "failed to bind port
# socket -99", EADDRNOTAVAIL; nvmet-rdma likewise), so nothing listens. The
# daemon runs with [boot] on that config.json; the addresses come up 20 s
# later — one on a netdev with rxe0, one on a dummy netdev with no RDMA at
# all. All three ports must listen (TCP checked in /proc/net/tcp, RDMA in the
# cm_id table) and `nvme discover` over TCP must work; then the admin's
# unlink of a declared link within the window is respected. Measured: the
# time from `ip addr add` to each port listening.
NQN=nqn.2024-01.io.e2e:tcpboot
A=192.0.2.1
B=198.51.100.1
need_daemon
modprobe nvmet-tcp 2>/dev/null || skip "no nvmet-tcp module in this kernel's initramfs"
modprobe nvme-tcp 2>/dev/null || skip "no nvme-tcp module in this kernel's initramfs"

must veth veth0 veth1
must ip link add dummy0 type dummy
must ip link set dummy0 up
must rxe_add rxe0 veth0
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420 tcp
must nvmet_port 2 $B 4420 tcp
must nvmet_port 3 $A 4421 rdma
for p in 1 2 3; do
	if nvmet_link $p $NQN 2>"$W/ln.err"; then fail "port $p: link accepted with its address absent"; fi
	log "port $p refused as at boot: $(cat "$W/ln.err")"
	nvmet_linked $p $NQN && fail "port $p: a refused link was left in configfs"
done
dmesg | grep -q 'failed to bind port socket' || warn "no 'failed to bind port socket' in dmesg"
listening tcp $A 4420 && fail "port 1 listens with no link"

cat >"$W/nvmet.json" <<JSON
{"hosts": [], "ports": [
 {"portid": 1, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"}, "referrals": [], "subsystems": ["$NQN"]},
 {"portid": 2, "addr": {"adrfam": "ipv4", "traddr": "$B", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"}, "referrals": [], "subsystems": ["$NQN"]},
 {"portid": 3, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4421", "trtype": "rdma"}, "referrals": [], "subsystems": ["$NQN"]}
], "subsystems": [{"nqn": "$NQN", "attr": {"allow_any_host": "1"}, "namespaces": [], "allowed_hosts": []}]}
JSON
write_config
printf '\n[boot]\nnvmet_config = "%s"\nwindow = "5m"\n' "$W/nvmet.json" >>"$W/config.toml"
daemon_start || fail "daemon did not start"
rb status | grep -q "declared in $W/nvmet.json" || fail "status does not say the links are declared: $(rb status)"
check_rc
[ $? = 2 ] || fail "check is not CRITICAL with three declared ports not listening"
sleep 19 # the addresses come up 20 s after the restore
t0=$(now)
must addr veth0 $A/24
must addr dummy0 $B/24
ms1=$(wait_listen tcp $A 4420 20 "$t0") || fail "TCP port 1 not listening 20 s after its address: $(rb status)"
ms2=$(wait_listen tcp $B 4420 20 "$t0") || fail "TCP port 2 (no RDMA on its netdev) not listening 20 s after its address: $(rb status)"
ms3=$(wait_listen nvmet_rdma $A 4421 20 "$t0") || fail "RDMA port 3 not listening 20 s after its address: $(rb status)"
for p in 1 2 3; do nvmet_linked $p $NQN || fail "port $p: declared link missing"; done
discover $A 4420 $NQN tcp || fail "nvme discover over TCP ($A:4420) fails"
discover $B 4420 $NQN tcp || fail "nvme discover over TCP ($B:4420) fails"
status_of nvmet 1 | grep -q 'listening=true' || fail "status: port 1 not verified listening: $(status_of nvmet 1)"
_i=0
until check_rc >/dev/null; do
	[ $_i -ge 50 ] && fail "check not OK 5 s after every port listens"
	sleep 0.1
	_i=$((_i + 1))
done

# Within the window the admin unlinks port 2's declared link: respected.
must nvmet_unlink 2 $NQN
sleep 3
nvmet_linked 2 $NQN && fail "the admin's unlink of port 2 within the window was undone"
listening tcp $B 4420 && fail "port 2 still listens with no link"
# The socket outlives its address: port 1 keeps listening with $A removed
# and re-added, and the daemon writes nothing for it.
must ip addr del $A/24 dev veth0
sleep 1
listening tcp $A 4420 || fail "port 1 stopped listening when its address went"
must addr veth0 $A/24
metric "tcp_ms=$ms1"
metric "tcp_no_rdma_ms=$ms2"
metric "rdma_ms=$ms3"
daemon_alive || fail "the daemon died"
daemon_stop
pass "restore before the addresses: TCP ports listening ${ms1} / ${ms2} ms (no RDMA) and the RDMA port ${ms3} ms after the addresses came; discovery over TCP works; the admin's unlink within the window respected"
