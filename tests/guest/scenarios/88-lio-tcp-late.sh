# lio-tcp-late: the claim that LIO iSCSI/TCP needs no completion at boot,
# checked: an iSCSI/TCP np (iser=0) created while its address is on no
# netdev is accepted and listens at once (LIO binds its TCP socket with
# IP_FREEBIND), and once the address appears an initiator logs in — with no
# daemon running. For contrast, nvmet-tcp on an absent address refuses the
# link (tcp-boot).
IQN=iqn.2024-01.io.e2e:liotcp
A=192.0.2.1
must veth veth0 veth1
must lio_target $IQN
NP=$T/iscsi/$IQN/tpgt_1/np/$A:3260
mkdir "$NP" 2>"$W/np.err" || fail "iSCSI/TCP np on an absent address refused: $(cat "$W/np.err")"
[ "$(cat "$NP/iser")" = 0 ] || fail "np iser is not 0"
wait_listen tcp $A 3260 5 >/dev/null || fail "the np on an absent address does not listen (no IP_FREEBIND?)"
t0=$(now)
must addr veth0 $A/24
iscsid_start || fail "iscsid did not start: $(tail -n 5 "$W/iscsid.log" 2>/dev/null)"
must iscsiadm -m discovery -t sendtargets -p $A:3260
must iscsiadm -m node -T $IQN -p $A:3260 --login
ms=$(e2eutil since "$t0")
must iscsiadm -m node -T $IQN -p $A:3260 --logout
metric "login_after_addr_ms=$ms"
pass "LIO iSCSI/TCP: np on an absent address accepted and listening (IP_FREEBIND); login ${ms} ms after the address came, nothing to complete"
