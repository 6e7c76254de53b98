# siw-reset: nvmet-reset on soft-iWARP (siw.ko built out of tree).
have_siw || skip "siw.ko not available: $(cat /e2e/siw-missing 2>/dev/null || echo 'does not load')"
RTYPE=siw
. /e2e/scenarios/01-nvmet-reset.sh
