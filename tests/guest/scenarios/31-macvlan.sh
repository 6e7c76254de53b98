# macvlan: vlan with 198.51.100.1/24 on a macvlan mv0 (mode bridge) over
# veth0, where rxe0 sits: rxe0's GID table carries the macvlan's address.
UPPER=macvlan
. /e2e/scenarios/30-vlan.sh
