# wildcard: an nvmet port on 0.0.0.0:4430. The daemon leaves it alone (plan
# says nothing to do, the port is never re-enabled) and the kernel itself
# re-creates the per-device listener when rxe0 comes back.
NQN=nqn.2024-01.io.e2e:wild
A=192.0.2.1
need_daemon

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
must nvmet_subsys $NQN
must nvmet_port 3 0.0.0.0 4430
must nvmet_link 3 $NQN
e2eutil listening -wild -comm nvmet_rdma -addr 0.0.0.0 -port 4430 -dev rxe0 || fail "no wildcard listener on rxe0 at setup"
write_config
daemon_start || fail "daemon did not start"
e0=$(port_enables 3)

must rdma_del rxe0
sleep 1
must rb plan
grep -qi 'nothing to do' "$W/run.out" || fail "plan during the outage is not empty: $(head -n 3 "$W/run.out")"
t0=$(now)
must rxe_add rxe0 veth0
ms=$(e2eutil wait-listen -wild -comm nvmet_rdma -addr 0.0.0.0 -port 4430 -dev rxe0 -since "$t0" -timeout 10s) ||
	fail "the kernel did not re-create the wildcard listener on rxe0"
metric "kernel_heal_ms=$ms"
sleep 3
[ "$(port_enables 3)" = "$e0" ] || fail "port 3 was re-enabled ($e0 -> $(port_enables 3) 'enabling port 3' lines): the daemon touched it"
[ -L $N/ports/3/subsystems/$NQN ] || fail "the wildcard port lost its link"
must rb plan
grep -qi 'nothing to do' "$W/run.out" || fail "plan after the return is not empty"
line=$(status_of nvmet 3)
log "status: $line"
echo "$line" | grep -q 'managed=true' && fail "the wildcard port is reported as managed: $line"
discover $A 4430 $NQN || fail "discover through the wildcard port fails"
daemon_alive || fail "the daemon died"
daemon_stop
pass "wildcard port left alone (no re-enable, plan empty); the kernel re-listened in ${ms} ms"
