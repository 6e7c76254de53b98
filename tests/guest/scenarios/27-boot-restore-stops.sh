# boot-restore-stops: nvmetcli's restore at boot stops at its first
# refusal (e2eutil nvmetcli-restore: nvmetcli's restore step for step). Here
# the RDMA device is not there yet: port 1's first link is refused
# (ENODEV), so the rest of port 1 and every later port — an NVMe/TCP port
# with an ANA group and a referral, another RDMA port — are never made.
# With [boot] on that config.json the daemon makes them: the TCP port
# listens at once (its address is up), the RDMA ports once rxe0 appears;
# `nvme discover` over both lists what the file declares, check goes from
# WARNING to OK, and status named what each object waited for. Measured:
# rdma link add → every declared port listening.
# The host allowed into S1 is this guest's own (nvme-cli's hostnqn): the
# discovery log page lists S1 only once its allowed host is linked.
H=$(cat /etc/nvme/hostnqn 2>/dev/null)
[ -n "$H" ] || H=$(nvme show-hostnqn 2>/dev/null)
[ -n "$H" ] || skip "no host NQN in this guest"
S1=nqn.2024-01.io.e2e:stops-1
S2=nqn.2024-01.io.e2e:stops-2
A=192.0.2.1
need_daemon
modprobe nvmet-tcp 2>/dev/null || skip "no nvmet-tcp module in this kernel's initramfs"
modprobe nvme-tcp 2>/dev/null || skip "no nvme-tcp module in this kernel's initramfs"

must veth veth0 veth1
must addr veth0 $A/24
cat >"$W/nvmet.json" <<JSON
{"hosts": [{"nqn": "$H"}],
 "subsystems": [
  {"nqn": "$S1", "attr": {"allow_any_host": "0", "model": "e2e-stops"}, "allowed_hosts": ["$H"],
   "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "/dev/nullb0"}}]},
  {"nqn": "$S2", "attr": {"allow_any_host": "1"}, "allowed_hosts": [],
   "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "/dev/nullb1"}}, {"nsid": 2, "enable": 1, "device": {"path": "/dev/nullb2"}}]}
 ],
 "ports": [
  {"portid": 1, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4420", "trtype": "rdma"},
   "subsystems": ["$S1", "$S2"], "ana_groups": [{"grpid": 1, "ana": {"state": "optimized"}}], "referrals": []},
  {"portid": 2, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"},
   "param": {"inline_data_size": "16384"},
   "subsystems": ["$S2"], "ana_groups": [{"grpid": 2, "ana": {"state": "non-optimized"}}],
   "referrals": [{"name": "peer", "addr": {"adrfam": "ipv4", "traddr": "192.0.2.9", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"}, "enable": 1}]},
  {"portid": 3, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4421", "trtype": "rdma"},
   "subsystems": ["$S1"], "ana_groups": [], "referrals": []}
 ]}
JSON
if e2eutil nvmetcli-restore "$W/nvmet.json" >"$W/restore.out" 2>&1; then fail "the restore went through with no RDMA device: $(cat "$W/restore.out")"; fi
log "restore: $(tail -n 1 "$W/restore.out")"
[ -d "$N/subsystems/$S2/namespaces/2" ] || fail "the restore did not get to the ports"
[ -d "$N/ports/1" ] || fail "port 1 not made by the restore"
[ -d "$N/ports/2" ] && fail "the restore did not stop at port 1"
[ "$(ls "$N/ports/1/subsystems" | wc -l)" = 0 ] || fail "port 1 has links after a refused first link"

write_config
printf '\n[boot]\nnvmet_config = "%s"\nwindow = "5m"\n' "$W/nvmet.json" >>"$W/config.toml"
t0=$(now)
daemon_start || fail "daemon did not start"
ms_tcp=$(wait_listen tcp $A 4420 20 "$t0") || fail "TCP port 2 not listening 20 s after the daemon started: $(rb status)"
[ "$(cat "$N/ports/2/ana_groups/2/ana_state")" = non-optimized ] || fail "ANA group 2 of port 2: $(cat "$N/ports/2/ana_groups/2/ana_state" 2>&1)"
[ "$(cat "$N/ports/2/referrals/peer/enable")" = 1 ] || fail "referral of port 2 not enabled"
[ "$(cat "$N/ports/2/param_inline_data_size")" = 16384 ] || fail "port 2 param_inline_data_size: $(cat "$N/ports/2/param_inline_data_size")"
[ -d "$N/ports/3" ] || fail "port 3 not made"
discover $A 4420 $S2 tcp || fail "nvme discover over TCP fails"
rb status >"$W/status.out" 2>&1
check_rc && fail "check is OK while two declared RDMA ports do not listen"
grep -q "nvmet 3 192.0.2.1:4421" "$W/check.out" || fail "check does not name port 3: $(cat "$W/check.out")"
t1=$(now)
must rxe_add rxe0 veth0
ms1=$(wait_listen nvmet_rdma $A 4420 20 "$t1") || fail "RDMA port 1 not listening 20 s after rdma link add: $(rb status)"
ms3=$(wait_listen nvmet_rdma $A 4421 20 "$t1") || fail "RDMA port 3 not listening 20 s after rdma link add: $(rb status)"
for l in "1 $S1" "1 $S2" "2 $S2" "3 $S1"; do
	set -- $l
	nvmet_linked $1 $2 || fail "port $1: declared link to $2 missing"
done
discover $A 4420 $S1 || fail "nvme discover over RDMA fails"
discover $A 4420 $S2 || fail "nvme discover over RDMA does not list $S2"
[ -L "$N/subsystems/$S1/allowed_hosts/$H" ] || fail "S1's allowed host not linked"
[ "$(cat "$N/subsystems/$S1/attr_model")" = e2e-stops ] || fail "S1's attributes not written: model $(cat "$N/subsystems/$S1/attr_model")"
_i=0
until check_rc >/dev/null; do
	[ $_i -ge 50 ] && fail "check not OK 5 s after every port listens: $(cat "$W/check.out")"
	sleep 0.1
	_i=$((_i + 1))
done
grep -q "completed the saved config" "$W/check.out" || log "check does not say the saved config is complete: $(head -n 1 "$W/check.out")"
grep -q 'saved config: object made.*ports/2' "$W/daemon.log" || fail "no journal line for the port made"
daemon_alive || fail "the daemon died"
# The admin removes the referral: never made again, even after a restart.
rmdir "$N/ports/2/referrals/peer" || fail "rmdir referral"
daemon_stop
daemon_start || fail "daemon did not restart"
sleep 2
[ -d "$N/ports/2/referrals/peer" ] && fail "the admin's removal of a referral was undone after a restart"
daemon_stop
metric "tcp_port_ms=$ms_tcp"
metric "rdma_port1_ms=$ms1"
metric "rdma_port3_ms=$ms3"
pass "a restore stopped at its first refused link completed: TCP port ${ms_tcp} ms after start, RDMA ports ${ms1}/${ms3} ms after rdma link add"
