# lio-wildcard: targetcli's defaults — `/iscsi create` adds the default
# portal 0.0.0.0:3260 to every target (global auto_add_default_portal=true),
# and `portals/0.0.0.0:3260 enable_iser true` writes iser=1 on it. Two such
# targets share the wildcard np. rdma_cm re-creates wildcard listeners on
# every new device itself, so after an rxe0 reset the kernel re-listens
# (a per-device child LISTEN on rxe0) and the daemon leaves the portals
# alone: plan empty, not managed, iser still 1, the listener the kernel
# re-created is not re-created again.
# Metric kernel_heal_ms.
A=192.0.2.1
Q1=iqn.2024-01.io.e2e:default-1
Q2=iqn.2024-01.io.e2e:default-2

must veth veth0 veth1
must addr veth0 $A/24
must rxe_add rxe0 veth0
for q in $Q1 $Q2; do
	must lio_target $q
	must lio_portal $q 0.0.0.0 3260
done
e2eutil listening -wild -comm ib_isert -addr 0.0.0.0 -port 3260 -dev rxe0 ||
	fail "kernel fact: no wildcard iSER listener on rxe0 at setup: $(rdma resource show cm_id | grep isert)"

need_daemon
write_config
daemon_start || fail "daemon did not start"
must rdma_del rxe0
sleep 1
must rb plan
grep -qi 'nothing to do' "$W/run.out" || fail "plan during the outage is not empty: $(head -n 3 "$W/run.out")"
t0=$(now)
must rxe_add rxe0 veth0
ms=$(e2eutil wait-listen -wild -comm ib_isert -addr 0.0.0.0 -port 3260 -dev rxe0 -since "$t0" -timeout 10s) ||
	fail "kernel fact: the kernel did not re-create the wildcard iSER listener on rxe0"
metric "kernel_heal_ms=$ms"
c0=$(cmid_line ib_isert 0.0.0.0 3260)
sleep 8
# A daemon that toggled iser would have re-created the listener (new cm-idn).
[ "$(cmid_line ib_isert 0.0.0.0 3260)" = "$c0" ] || fail "the wildcard iSER listener was re-created after the kernel's own heal: '$c0' -> '$(cmid_line ib_isert 0.0.0.0 3260)'"
for q in $Q1 $Q2; do
	[ "$(lio_iser $q 0.0.0.0 3260)" = 1 ] || fail "iser of $q 0.0.0.0:3260 is not 1"
	line=$(status_of lio "$q/tpgt_1/0.0.0.0:3260") || true
	log "status: ${line:-(not listed)}"
	echo "$line" | grep -q 'managed=true' && fail "the wildcard portal of $q is reported as managed: $line"
done
must rb plan
grep -qi 'nothing to do' "$W/run.out" || fail "plan after the return is not empty"
check_rc || fail "check exits $? with only wildcard portals (want 0)"
daemon_alive || fail "the daemon died"
daemon_stop
pass "targetcli default portals (0.0.0.0:3260, iser) left alone; the kernel re-listened on rxe0 in ${ms} ms"
