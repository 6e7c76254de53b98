#!/bin/sh
# Boots Debian's 6.1 kernel under qemu and shows nvmet-rebind healing an
# nvmet port and a LIO iSER portal after an RDMA device reset, in plain words
# with timings. Needs root the first time (apt-get installs qemu and friends,
# downloads the kernel into ~/.cache/nvmet-rebind-vm). Same as `make demo`.
cd "$(dirname "$0")/.." || exit 1
exec go test -count=1 -timeout 30m -run '^TestDemo$' -v ./tests/
