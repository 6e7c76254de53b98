# siw-netdev-recreate: netdev-recreate (both orders) on soft-iWARP, nvmet only.
have_siw || skip "siw.ko not available: $(cat /e2e/siw-missing 2>/dev/null || echo 'does not load')"
RTYPE=siw
LIO=0
. /e2e/scenarios/03-netdev-recreate.sh
