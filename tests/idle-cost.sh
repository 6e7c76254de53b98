#!/bin/sh
# idle-cost.sh [SECONDS] [PORTS] [PORTALS] [model|full]: CPU seconds, RSS
# (mean and maximum of one sample a second, and at the end) and wakeups of `nvmet-rebind run` over SECONDS (default 600) with PORTS
# nvmet ports (default 4096) and PORTALS LIO iSER portals, one target each
# as OpenStack Cinder makes them (default 4096), in a configfs-shaped tree
# on tmpfs, and no events. model (default): configfs through the daemon's
# inotify model; full: run --no-watch (all of configfs read at every
# resync). Run on the host: without RDMA devices every object is managed
# with listening unknown; the first round plans every object, and the
# resyncs after it, which read the same (the same error included), keep
# that plan, as a target whose listeners are alive does. The periodic full
# rescan is every 10 minutes (rescan_interval; RESCAN=1m in the
# environment makes it every minute, to see a rescan's cost in a short run).
set -eu
SECS=${1:-600}
PORTS=${2:-4096}
PORTALS=${3:-4096}
MODE=${4:-model}
cd "$(dirname "$0")/.."
make -s build
W=$(mktemp -d /dev/shm/nvmet-rebind-idle.XXXXXX 2>/dev/null || mktemp -d)
PID=
trap '[ -z "$PID" ] || kill "$PID" 2>/dev/null; rm -rf "$W"' EXIT
# nvmet/hosts too, as the kernel makes it with the other two (its readdir
# order tells the daemon the list discipline).
mkdir -p "$W/cfs/nvmet/subsystems/nqn.2024-01.lab:a" "$W/cfs/nvmet/ports" "$W/cfs/nvmet/hosts" "$W/cfs/target/iscsi"
ip() { echo "10.$(($1 / 62500)).$(($1 / 250 % 250)).$(($1 % 250 + 1))"; }
i=1
while [ $i -le "$PORTS" ]; do
	d=$W/cfs/nvmet/ports/$i
	mkdir -p "$d/subsystems"
	echo rdma >"$d/addr_trtype"
	echo ipv4 >"$d/addr_adrfam"
	ip $i >"$d/addr_traddr"
	echo 4420 >"$d/addr_trsvcid"
	ln -s ../../../subsystems/nqn.2024-01.lab:a "$d/subsystems/nqn.2024-01.lab:a"
	i=$((i + 1))
done
i=1
while [ $i -le "$PORTALS" ]; do
	np=$W/cfs/target/iscsi/iqn.2010-10.org.openstack:volume-$i/tpgt_1/np/$(ip $i):3260
	mkdir -p "$np"
	echo 1 >"$np/iser"
	echo 1 >"${np%/np/*}/enable"
	i=$((i + 1))
done
printf '[policy]\nresync_interval = "30s"\nrescan_interval = "%s"\n' "${RESCAN:-10m}" >"$W/c.toml"
chmod 600 "$W/c.toml"
flag=
[ "$MODE" = full ] && flag=--no-watch
bin/nvmet-rebind --config "$W/c.toml" --configfs-root "$W/cfs" --state-dir "$W/st" --run-dir "$W/run" run $flag 2>"$W/log" &
PID=$!
# Start-up (the first full read) is not idle: measure from the first
# answer on the control socket.
i=0
while ! bin/nvmet-rebind --config "$W/c.toml" --configfs-root "$W/cfs" --state-dir "$W/st" --run-dir "$W/run" status >/dev/null 2>&1; do
	sleep 0.5
	i=$((i + 1))
	[ $i -lt 240 ] || { echo "the daemon did not answer in 120 s" >&2; tail -n 20 "$W/log" >&2; exit 1; }
done
ticks() { awk '{print $14 + $15}' /proc/$PID/stat; }
# The first round (every object planned) and the memory trim after it go
# on after the socket answers, longer on a loaded machine: the window
# starts once the daemon has used no CPU for two seconds (at most 60 s).
i=0 prev=-1
while [ $i -lt 60 ]; do
	t=$(ticks)
	[ "$t" = "$prev" ] && break
	prev=$t
	sleep 2
	i=$((i + 2))
done
ctx() { cat /proc/$PID/task/*/status | awk '/^voluntary_ctxt_switches|^nonvoluntary_ctxt_switches/ {s += $2} END {print s}'; }
rss() { awk '/VmRSS/ {print $2}' /proc/$PID/status; }
t0=$(ticks)
c0=$(ctx)
# RSS sampled every second over the window: its mean and maximum are the
# figures (one sample at the end would land before or after a resync's or
# a rescan's burst by chance).
n=0 sum=0 max=0 maxat=0
end=$(($(date +%s) + SECS))
while [ "$(date +%s)" -lt "$end" ]; do
	sleep 1
	r=$(rss)
	n=$((n + 1)) sum=$((sum + r))
	[ "$r" -gt "$max" ] && max=$r maxat=$n
done
t1=$(ticks)
c1=$(ctx)
hz=$(getconf CLK_TCK)
hwm=$(awk '/VmHWM/ {print $2}' /proc/$PID/status)
echo "mode=$MODE ports=$PORTS portals=$PORTALS seconds=$SECS cpu_seconds=$(awk "BEGIN {printf \"%.2f\", ($t1 - $t0) / $hz}") rss_mean_kb=$((sum / n)) rss_max_kb=$max rss_max_at_s=$maxat rss_end_kb=$(rss) rss_peak_since_start_kb=$hwm context_switches=$((c1 - c0)) resyncs=$((SECS / 30))"
grep -q 'disagreed' "$W/log" && { echo "the model disagreed with a rescan:" >&2; grep disagreed "$W/log" >&2; exit 1; }
exit 0
