# boot-lio-late-disk: rtslib's restore (targetctl restore, target.service)
# at boot goes on past a storage object whose disk is missing: it skips it
# ("Could not create StorageObject … skipped") and fails its LUN and mapped
# LUN in turn, making the rest (rtslib/root.py RTSRoot.restore). The script
# leaves what that restore leaves: block b0 (present) with its LUN 0 and
# mapped LUN 0, the TPG with an ACL, an iSER portal; nothing of b1, whose
# disk (a udev-style /dev/disk/by-id link) is late. With [boot] on that
# saveconfig.json, status and check (WARNING) say b1 waits for its disk;
# once a null_blk device made through its configfs appears behind the link
# the daemon makes b1 (its own backstore, enabled, its unit serial), LUN 1
# and mapped LUN 1, and an iSCSI/TCP initiator logged in as the ACL's node
# sees both disks. Measured: the link → mapped LUN 1 in place.
IQN=iqn.2024-01.io.e2e:liolate
INIT=iqn.2024-01.io.e2e:initiator
A=192.0.2.1
LATE=/dev/disk/by-id/e2e-lio-late
need_daemon
[ -d "$CFG/nullb" ] || skip "null_blk has no configfs here"
command -v iscsid >/dev/null || skip "no open-iscsi in this guest"
rm -f "$LATE"

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
cat >"$W/saveconfig.json" <<JSON
{"fabric_modules": [], "storage_objects": [
  {"plugin": "block", "name": "b0", "dev": "/dev/nullb1", "wwn": "e2e0000b0", "readonly": false, "write_back": false, "attributes": {"emulate_tpu": 0}},
  {"plugin": "block", "name": "b1", "dev": "$LATE", "wwn": "e2e0000b1", "readonly": false, "write_back": false, "attributes": {"emulate_tpu": 0, "hw_block_size": 512}}],
 "targets": [{"fabric": "iscsi", "wwn": "$IQN", "tpgs": [{"tag": 1, "enable": true, "attributes": {"authentication": 0, "generate_node_acls": 0},
   "luns": [{"index": 0, "storage_object": "/backstores/block/b0", "alias": "e2elun0"}, {"index": 1, "storage_object": "/backstores/block/b1", "alias": "e2elun1"}],
   "node_acls": [{"node_wwn": "$INIT", "mapped_luns": [{"index": 0, "tpg_lun": 0, "write_protect": false}, {"index": 1, "tpg_lun": 1, "write_protect": false}]}],
   "portals": [{"ip_address": "$A", "port": 3260, "iser": true}]}]}]}
JSON
# What rtslib's restore leaves without b1's disk.
B0=$T/core/iblock_0/b0
TPG=$T/iscsi/$IQN/tpgt_1
{ mkdir -p $B0 && echo udev_path=/dev/nullb1 >$B0/control && echo /dev/nullb1 >$B0/udev_path && echo 1 >$B0/enable; } || fail "setup: b0"
{ mkdir -p $TPG/lun/lun_0 && ln -s $B0 $TPG/lun/lun_0/e2elun0; } || fail "setup: lun 0"
echo 0 >$TPG/attrib/authentication || fail "setup: authentication"
must lio_portal $IQN $A 3260
{ mkdir -p $TPG/acls/$INIT/lun_0 && ln -s $TPG/lun/lun_0 $TPG/acls/$INIT/lun_0/e2emap0; } || fail "setup: mapped lun 0"
echo 1 >$TPG/enable || fail "setup: tpg enable"
wait_listen ib_isert $A 3260 10 >/dev/null || fail "the restored iSER portal does not listen"

write_config
printf '\n[boot]\ntarget_config = "%s"\nwindow = "5m"\n' "$W/saveconfig.json" >>"$W/config.toml"
daemon_start || fail "daemon did not start"
rb status >"$W/status.out" 2>&1
grep -q "target/core/block/b1: waiting for $LATE" "$W/status.out" || fail "status does not say b1 waits for its disk: $(cat "$W/status.out")"
grep -q "lun/lun_1: waiting for target/core/block/b1" "$W/status.out" || fail "status does not say LUN 1 waits for b1: $(cat "$W/status.out")"
check_rc
[ $? = 1 ] || fail "check is not WARNING with b1 waiting for its disk in the window: $(cat "$W/check.out")"
[ -e $TPG/lun/lun_1 ] && fail "LUN 1 made before its storage object"

dev=$(late_disk e2eliolate) || fail "the late null_blk device did not appear"
mkdir -p /dev/disk/by-id
t0=$(now)
ln -s "../../${dev#/dev/}" "$LATE" || fail "ln -s $LATE"
# has_link DIR: DIR holds a symlink.
has_link() {
	for _f in "$1"/*; do [ -L "$_f" ] && return 0; done
	return 1
}
_i=0
until has_link $TPG/acls/$INIT/lun_1; do
	[ $_i -ge 200 ] && fail "mapped LUN 1 not made 20 s after b1's disk: $(rb status | tail -n 6)"
	sleep 0.05
	_i=$((_i + 1))
done
ms=$(e2eutil since "$t0")
B1=$(ls -d $T/core/*_*/b1 2>/dev/null)
[ "$B1" = "$T/core/iblock_1/b1" ] || fail "b1 is at '$B1', not in a backstore of its own (iblock_1)"
[ "$(cat $B1/enable)" = 1 ] || fail "b1 not enabled"
grep -q "e2e0000b1" $B1/wwn/vpd_unit_serial || fail "b1's unit serial: $(cat $B1/wwn/vpd_unit_serial)"
[ "$(readlink -f $TPG/lun/lun_1/e2elun1)" = "$(readlink -f $B1)" ] || fail "LUN 1 links $(readlink -f $TPG/lun/lun_1/e2elun1)"
[ "$(readlink -f $TPG/lun/lun_0/e2elun0)" = "$(readlink -f $B0)" ] || fail "LUN 0 changed"
[ "$(ls $TPG/acls/$INIT/lun_0)" = "e2emap0 write_protect" ] || log "mapped LUN 0 holds $(ls $TPG/acls/$INIT/lun_0)"
grep -q 'object made.*target/core/block/b1' "$W/daemon.log" || fail "no journal line for b1 made"

# An initiator logged in as the ACL's node sees both disks.
mkdir -p /etc/iscsi
echo "InitiatorName=$INIT" >/etc/iscsi/initiatorname.iscsi
iscsid_start || fail "iscsid did not start: $(tail -n 5 "$W/iscsid.log" 2>/dev/null)"
must iscsiadm -m discovery -t sendtargets -p $A:3260
must iscsiadm -m node -T $IQN -p $A:3260 --login
_i=0
until [ "$(iscsiadm -m session -P 3 2>/dev/null | grep -c 'Attached scsi disk')" = 2 ]; do
	[ $_i -ge 100 ] && fail "the initiator does not see 2 disks: $(iscsiadm -m session -P 3 2>&1 | grep -i 'lun\|attached' | head -n 6)"
	sleep 0.1
	_i=$((_i + 1))
done
must iscsiadm -m node -T $IQN -p $A:3260 --logout
_i=0
until check_rc >/dev/null; do
	[ $_i -ge 50 ] && fail "check not OK once b1, LUN 1 and mapped LUN 1 are made: $(cat "$W/check.out")"
	sleep 0.1
	_i=$((_i + 1))
done
daemon_alive || fail "the daemon died"
daemon_stop
rm -f "$LATE"
metric "disk_to_mapped_lun_ms=$ms"
pass "rtslib's restore skipped b1 (late disk): made with LUN 1 and mapped LUN 1 ${ms} ms after its disk's link; an initiator logged in as the ACL's node sees both disks"
