#!/bin/sh
# idle-cost.sh [SECONDS] [PORTS]: CPU seconds, RSS and wakeups of
# `nvmet-rebind run` over SECONDS (default 600) with PORTS (default 1000)
# managed nvmet ports in a configfs-shaped tree and no events. Run on the
# host: without RDMA netlink every port is managed with listening unknown,
# so each resync reads every port completely (the worst case).
set -eu
SECS=${1:-600}
PORTS=${2:-1000}
cd "$(dirname "$0")/.."
make -s build
W=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/cfs/nvmet/subsystems/nqn.2024-01.lab:a" "$W/cfs/nvmet/ports" "$W/cfs/target/iscsi"
i=1
while [ $i -le "$PORTS" ]; do
	d=$W/cfs/nvmet/ports/$i
	mkdir -p "$d/subsystems"
	echo rdma >"$d/addr_trtype"
	echo ipv4 >"$d/addr_adrfam"
	echo "10.0.$((i / 250)).$((i % 250 + 1))" >"$d/addr_traddr"
	echo 4420 >"$d/addr_trsvcid"
	ln -s ../../../subsystems/nqn.2024-01.lab:a "$d/subsystems/nqn.2024-01.lab:a"
	i=$((i + 1))
done
printf '[policy]\nresync_interval = "30s"\n' >"$W/c.toml"
chmod 600 "$W/c.toml"
bin/nvmet-rebind --config "$W/c.toml" --configfs-root "$W/cfs" --state-dir "$W/st" --run-dir "$W/run" run 2>"$W/log" &
PID=$!
sleep 3
ticks() { awk '{print $14 + $15}' /proc/$PID/stat; }
ctx() { cat /proc/$PID/task/*/status | awk '/^voluntary_ctxt_switches|^nonvoluntary_ctxt_switches/ {s += $2} END {print s}'; }
t0=$(ticks)
c0=$(ctx)
sleep "$SECS"
t1=$(ticks)
c1=$(ctx)
hz=$(getconf CLK_TCK)
rss=$(awk '/VmRSS/ {print $2}' /proc/$PID/status)
hwm=$(awk '/VmHWM/ {print $2}' /proc/$PID/status)
echo "ports=$PORTS seconds=$SECS cpu_seconds=$(awk "BEGIN {printf \"%.2f\", ($t1 - $t0) / $hz}") rss_kb=$rss rss_peak_kb=$hwm context_switches=$((c1 - c0)) resyncs=$((SECS / 30))"
