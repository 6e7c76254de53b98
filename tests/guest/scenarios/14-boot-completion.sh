# boot-completion: at boot the saved configs were restored before the RDMA
# device existed, so the kernel refused the port→subsystem link (ENODEV) and
# iser=1. With [boot] pointing at nvmetcli's and targetcli's files, the
# daemon completes exactly what they declare once rxe0 appears: port 1's
# link, the portal's iser, and port 2, which the restore never made (boot
# completion makes the objects the file declares).
NQN=nqn.2024-01.io.e2e:boot
IQN=iqn.2024-01.io.e2e:boot
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must nvmet_subsys $NQN
must nvmet_port 1 $A 4420
if nvmet_link 1 $NQN 2>/dev/null; then fail "link accepted without an RDMA device"; fi
nvmet_linked 1 $NQN && fail "a refused link was left in configfs"
must lio_target $IQN
mkdir "$T/iscsi/$IQN/tpgt_1/np/$A:3260" || fail "mkdir np"
if echo 1 >"$T/iscsi/$IQN/tpgt_1/np/$A:3260/iser" 2>/dev/null; then fail "iser=1 accepted without an RDMA device"; fi
[ "$(lio_iser $IQN $A 3260)" = 0 ] || fail "refused iser reads 1"

cat >"$W/nvmet.json" <<JSON
{"hosts": [], "ports": [
 {"portid": 1, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4420", "trtype": "rdma"}, "referrals": [], "subsystems": ["$NQN"]},
 {"portid": 2, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4421", "trtype": "rdma"}, "referrals": [], "subsystems": ["$NQN"]}
], "subsystems": [{"nqn": "$NQN", "attr": {"allow_any_host": "1"}, "namespaces": [], "allowed_hosts": []}]}
JSON
cat >"$W/saveconfig.json" <<JSON
{"fabric_modules": [], "storage_objects": [], "targets": [{"fabric": "iscsi", "wwn": "$IQN", "tpgs": [{"tag": 1, "enable": true, "luns": [], "node_acls": [], "attributes": {}, "parameters": {}, "portals": [{"ip_address": "$A", "port": 3260, "iser": true, "offload": false}]}]}]}
JSON
write_config
printf '\n[boot]\nnvmet_config = "%s"\ntarget_config = "%s"\nwindow = "5m"\n' "$W/nvmet.json" "$W/saveconfig.json" >>"$W/config.toml"
daemon_start || fail "daemon did not start"
sleep 1
nvmet_linked 1 $NQN && fail "linked before the device exists"
# -o wide: each reason whole on its row (the default wraps a long path).
rb status -o wide | grep -q "declared in $W/nvmet.json" || fail "status does not say the link is declared: $(rb status -o wide)"
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "port 1 not completed 20 s after rdma link add"
ms2=$(wait_listen ib_isert $A 3260 20 "$t0") || fail "portal not completed 20 s after rdma link add"
nvmet_linked 1 $NQN || fail "link missing"
[ "$(lio_iser $IQN $A 3260)" = 1 ] || fail "iser not 1"
ms3=$(wait_listen nvmet_rdma $A 4421 20 "$t0") || fail "declared port 2 not made and listening 20 s after rdma link add: $(rb status)"
nvmet_linked 2 $NQN || fail "port 2's declared link missing"
discover $A 4420 $NQN || fail "nvme discover fails"
metric "complete_ms=$ms"
metric "complete_lio_ms=$ms2"
metric "complete_port2_ms=$ms3"
daemon_alive || fail "the daemon died"
daemon_stop
pass "boot restore completed when rxe0 appeared: nvmet ${ms} ms, iSER ${ms2} ms, port 2 made and listening ${ms3} ms"
