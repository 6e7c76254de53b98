# siw-netdev-recreate: netdev-recreate (both orders) on soft-iWARP, nvmet only:
# iSER cannot listen on siw on the iSCSI portal's own address:port, since siw
# listens with a real kernel TCP socket and the iSCSI/TCP portal holds it
# (isert: rdma_listen() failed: -98).
have_siw || skip "siw.ko not available: $(cat /e2e/siw-missing 2>/dev/null || echo 'does not load')"
RTYPE=siw
LIO=0
. /e2e/scenarios/03-netdev-recreate.sh
