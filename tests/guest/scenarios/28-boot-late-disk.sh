# boot-late-disk: nvmetcli's restore at boot stops at a namespace whose disk
# is not there yet (a late LVM, MD, multipath or iSCSI-backed disk: "failed
# to open block device (-2)", nvme-cli issue 1432): the rest of that
# subsystem, the next subsystem and both ports are never made. With [boot]
# the daemon makes them at once (both NVMe/TCP ports listen), says the
# namespace waits for its device path (check WARNING), and enables it once
# the disk appears behind a udev-style by-id link (a null_blk device made
# through its configfs, then the link): measured from the link to enable=1.
S1=nqn.2024-01.io.e2e:late-1
S2=nqn.2024-01.io.e2e:late-2
A=192.0.2.1
LATE=/dev/disk/by-id/e2e-late-lv1
need_daemon
modprobe nvmet-tcp 2>/dev/null || skip "no nvmet-tcp module in this kernel's initramfs"
modprobe nvme-tcp 2>/dev/null || skip "no nvme-tcp module in this kernel's initramfs"
[ -d "$CFG/nullb" ] || skip "null_blk has no configfs here"
rm -f "$LATE"

must veth veth0 veth1
must addr veth0 $A/24
cat >"$W/nvmet.json" <<JSON
{"hosts": [],
 "subsystems": [
  {"nqn": "$S1", "attr": {"allow_any_host": "1"}, "allowed_hosts": [],
   "namespaces": [{"nsid": 1, "enable": 1, "ana_grpid": 1, "device": {"path": "$LATE", "nguid": "5a1e0000-0000-4000-8000-000000000001"}},
                  {"nsid": 2, "enable": 1, "device": {"path": "/dev/nullb1"}}]},
  {"nqn": "$S2", "attr": {"allow_any_host": "1"}, "allowed_hosts": [],
   "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "/dev/nullb2"}}]}
 ],
 "ports": [
  {"portid": 1, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"},
   "subsystems": ["$S1", "$S2"], "ana_groups": [], "referrals": []},
  {"portid": 2, "addr": {"adrfam": "ipv4", "traddr": "$A", "treq": "not specified", "trsvcid": "4421", "trtype": "tcp"},
   "subsystems": ["$S2"], "ana_groups": [], "referrals": []}
 ]}
JSON
if e2eutil nvmetcli-restore "$W/nvmet.json" >"$W/restore.out" 2>&1; then fail "the restore went through without its disk"; fi
log "restore: $(tail -n 1 "$W/restore.out")"
[ "$(cat "$N/subsystems/$S1/namespaces/1/enable")" = 0 ] || fail "namespace 1 enabled without its disk"
[ -d "$N/subsystems/$S1/namespaces/2" ] && fail "the restore did not stop at namespace 1"
[ -d "$N/subsystems/$S2" ] && fail "the restore made the next subsystem"

write_config
printf '\n[boot]\nnvmet_config = "%s"\nwindow = "5m"\n' "$W/nvmet.json" >>"$W/config.toml"
t0=$(now)
daemon_start || fail "daemon did not start"
ms1=$(wait_listen tcp $A 4420 20 "$t0") || fail "port 1 not listening: $(rb status)"
ms2=$(wait_listen tcp $A 4421 20 "$t0") || fail "port 2 not listening: $(rb status)"
[ "$(cat "$N/subsystems/$S1/namespaces/2/enable")" = 1 ] || fail "S1 namespace 2 not made and enabled"
[ "$(cat "$N/subsystems/$S2/namespaces/1/enable")" = 1 ] || fail "S2 namespace 1 not made and enabled"
rb status >"$W/status.out" 2>&1
grep -q "namespaces/1#enable: waiting for $LATE" "$W/status.out" || fail "status does not say what namespace 1 waits for: $(cat "$W/status.out")"
check_rc
[ $? = 1 ] || fail "check is not WARNING with a namespace waiting for its disk in the window: $(cat "$W/check.out")"
grep -q "waiting for $LATE" "$W/check.out" || fail "check does not say what it waits for: $(cat "$W/check.out")"
discover $A 4420 $S2 tcp || fail "nvme discover over TCP fails"

# The disk comes: a null_blk device made through its configfs, then the
# by-id link udev would make.
dev=$(late_disk e2elate) || fail "the late null_blk device did not appear"
mkdir -p /dev/disk/by-id
t1=$(now)
ln -s "../../${dev#/dev/}" "$LATE" || fail "ln -s $LATE"
_i=0
until [ "$(cat "$N/subsystems/$S1/namespaces/1/enable")" = 1 ]; do
	[ $_i -ge 200 ] && fail "namespace 1 not enabled 20 s after its disk: $(rb status)"
	sleep 0.05
	_i=$((_i + 1))
done
ms_disk=$(e2eutil since "$t1")
discover $A 4420 $S1 tcp || fail "nvme discover over TCP does not list $S1"
_i=0
until check_rc >/dev/null; do
	[ $_i -ge 50 ] && fail "check not OK 5 s after the namespace is enabled: $(cat "$W/check.out")"
	sleep 0.1
	_i=$((_i + 1))
done
grep -q 'saved config: object made.*namespaces/1#enable' "$W/daemon.log" || fail "no journal line for the namespace enabled"
daemon_alive || fail "the daemon died"
daemon_stop
rm -f "$LATE"
metric "port_ms=$ms1"
metric "disk_to_enable_ms=$ms_disk"
pass "a restore stopped at a late disk completed: ports ${ms1}/${ms2} ms after start, namespace enabled ${ms_disk} ms after its disk's link"
