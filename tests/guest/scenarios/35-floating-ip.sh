# floating-ip: an HA service address as ClusterLabs sets it up (IPaddr2 adds
# 192.0.2.10/24 as a secondary address of veth0, whose primary is 192.0.2.1;
# iSCSITarget implementation=lio-t portals="192.0.2.10:3260"
# iser_portals="192.0.2.10" creates the np with targetcli and writes 1 to
# its iser), plus nvmet ports on both addresses of the one device: port 1 on
# the primary 192.0.2.1:4420, port 2 on the floating 192.0.2.10:4420.
# rxe0 reset → all three listen again, discover works on both addresses.
# Then the resource is restarted in place (IPaddr2 stop/start: the floating
# address is deleted and added back 3 s later on the same netdev): the
# listeners never died, so nothing is re-bound — no port re-enabled, the
# iSER cm_id unchanged — and discover on 192.0.2.10 works again.
A=192.0.2.1
F=192.0.2.10
NQA=nqn.2024-01.io.e2e:primary
NQF=nqn.2024-01.io.e2e:floating
IQN=iqn.2024-01.io.e2e:ha-target

must veth veth0 veth1
must addr veth0 $A/24
must addr veth0 $F/24
ip -o addr show dev veth0 | grep -q "inet $F/24 .*secondary" || fail "$F is not a secondary address of veth0: $(ip -o addr show dev veth0)"
must rxe_add rxe0 veth0
must nvmet_subsys $NQA /dev/nullb0
must nvmet_subsys $NQF /dev/nullb1
must nvmet_port 1 $A 4420
must nvmet_link 1 $NQA
must nvmet_port 2 $F 4420
must nvmet_link 2 $NQF
must lio_target $IQN
must lio_portal $IQN $F 3260
listening nvmet_rdma $A 4420 rxe0 || fail "port 1 does not listen on rxe0"
listening nvmet_rdma $F 4420 rxe0 || fail "port 2 (floating) does not listen on rxe0"
listening ib_isert $F 3260 rxe0 || fail "the floating iSER portal does not listen on rxe0"

need_daemon
write_config
daemon_start || fail "daemon did not start"

must rdma_del rxe0
wait_gone nvmet_rdma $F 4420 5 || fail "listener survived rdma link delete"
sleep 1
t0=$(now)
must rxe_add rxe0 veth0
ms=$(wait_listen nvmet_rdma $A 4420 20 "$t0") || fail "port 1 not listening 20 s after rdma link add"
msf=$(wait_listen nvmet_rdma $F 4420 20 "$t0") || fail "port 2 (floating) not listening 20 s after rdma link add"
wait_listen ib_isert $F 3260 20 "$t0" >/dev/null || fail "the floating iSER portal not listening 20 s after rdma link add"
log "LISTEN ${ms} ms (primary), ${msf} ms (floating) after rdma link add"
metric "heal_ms=$msf"
discover $A 4420 $NQA || fail "discover on the primary address fails after the heal"
discover $F 4420 $NQF || fail "discover on the floating address fails after the heal"
check_rc || fail "check exits $? after the heal (want 0)"

# The HA resource restarts in place: the address goes and comes back.
e1=$(port_enables 1)
e2=$(port_enables 2)
c0=$(cmid_line ib_isert $F 3260)
must ip addr del $F/24 dev veth0
sleep 3
must addr veth0 $F/24
sleep 8
[ "$(port_enables 2)" = "$e2" ] || fail "port 2 was re-enabled after its address came back on the same netdev (the listener never died)"
[ "$(port_enables 1)" = "$e1" ] || fail "port 1 was re-enabled"
[ "$(cmid_line ib_isert $F 3260)" = "$c0" ] || fail "the floating iSER listener was re-created: '$c0' -> '$(cmid_line ib_isert $F 3260)'"
discover $F 4420 $NQF || fail "discover on the floating address fails after it came back"
status_expect "after the restart" nvmet 2 state=listening rdma_device=rxe0
status_expect "after the restart" lio "$IQN/tpgt_1/$F:3260" state=listening rdma_device=rxe0
check_rc || fail "check exits $? after the address came back (want 0)"
daemon_alive || fail "the daemon died"
daemon_stop
pass "primary and floating address on one device: reset healed (${ms} / ${msf} ms); address restart left alone"
