#!/bin/sh
# /init of the end-to-end test VM (dash). Mounts the pseudo file systems,
# loads the modules, runs the scenarios named on the kernel command line
# (e2e.scenarios=a,b,c) one after the other, prints
#   E2E BEGIN <name> / E2E RESULT <name> PASS|FAIL|SKIP <detail> / E2E METRIC …
# and finally "E2E DONE rc=<n>", then powers off.
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
umask 022
# First of all: the harness tells a kernel that died before userspace from
# a failure of ours by this line.
echo "E2E INIT"

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t tmpfs tmpfs /run
mkdir -p /tmp/e2e
echo 1 > /proc/sys/kernel/printk_ratelimit 2>/dev/null
# Kernel messages go to the ring buffer only (quiet); the scripts read dmesg.
echo 4 > /proc/sys/kernel/printk 2>/dev/null

. /e2e/lib.sh

T0=$(e2eutil now)
SCENARIOS=
BENCH=0
MODE=suite
for w in $(cat /proc/cmdline); do
	case "$w" in
	e2e.scenarios=*) SCENARIOS=$(echo "${w#e2e.scenarios=}" | tr ',' ' ') ;;
	e2e.bench=*) BENCH=${w#e2e.bench=} ;;
	e2e.mode=*) MODE=${w#e2e.mode=} ;;
	esac
done
export E2E_BENCH=$BENCH

info "kernel=$(uname -r) mode=$MODE scenarios=$SCENARIOS"
# Modules of lib.sh's list that this kernel builds in or dropped (the
# harness checked its modules.dep): not loaded.
if [ -s /e2e/modules-absent ]; then
	for _m in $(cat /e2e/modules-absent); do
		MODULES=$(echo " $MODULES " | sed "s/ $_m / /; s/^ *//; s/ *\$//")
	done
	info "modules not in this kernel (built in or gone): $(cat /e2e/modules-absent)"
fi
load_modules || {
	echo "E2E RESULT boot FAIL module loading failed"
	echo "E2E DONE rc=1"
	poweroff -f
}
grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs configfs /sys/kernel/config
ip link set lo up
info "boot ready after $(e2eutil since "$T0") ms in init (uptime $(cut -d' ' -f1 /proc/uptime) s)"
if [ -x /usr/local/bin/nvmet-rebind ]; then
	info "daemon: $(nvmet-rebind --version 2>&1 | head -n 1)"
else
	info "daemon: not built: $(cat /e2e/daemon-missing 2>/dev/null | head -n 3)"
fi

# The cost of one LISTEN poll (the granularity of every *_ms metric).
_t=$(e2eutil now)
for _i in 1 2 3 4 5; do rdma resource show cm_id >/dev/null 2>&1; done
info "one 'rdma resource show cm_id' takes $(( ($(e2eutil now) - _t) / 5000 )) ms here (LISTEN poll granularity)"

RC=0
if [ "$MODE" = demo ]; then
	/bin/dash /e2e/demo.sh || RC=1
	cleanup_all >/dev/null 2>&1
else
	for s in $SCENARIOS; do
		run_scenario "$s" || RC=1
	done
fi
echo "E2E DONE rc=$RC"
sync
poweroff -f
sleep 10
