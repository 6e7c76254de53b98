#!/bin/sh
# trigger-latency.sh [N]: wall time of `nvmet-rebind trigger` (what the udev
# RUN hook executes) with a daemon running, N times (default 100), and
# without a daemon (one locked reconcile of an empty tree), 20 times.
set -eu
N=${1:-100}
cd "$(dirname "$0")/.."
make -s build
W=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/cfs/nvmet/ports" "$W/cfs/nvmet/subsystems" "$W/cfs/target/iscsi"
printf '[policy]\nresync_interval = "30s"\n' >"$W/c.toml"
chmod 600 "$W/c.toml"
rb() { bin/nvmet-rebind --config "$W/c.toml" --configfs-root "$W/cfs" --state-dir "$W/st" --run-dir "$W/run" "$@"; }
stats() { sort -n | awk '{a[NR]=$1} END {printf "n=%d median_ms=%.1f p95_ms=%.1f max_ms=%.1f\n", NR, a[int((NR+1)/2)]/1000, a[int(NR*0.95)]/1000, a[NR]/1000}'; }
rb run 2>"$W/log" &
PID=$!
sleep 1
printf 'with daemon:    '
i=0
while [ $i -lt "$N" ]; do
	s=$(date +%s%N); rb trigger; e=$(date +%s%N)
	echo $(((e - s) / 1000)); i=$((i + 1))
done | stats
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
printf 'without daemon: '
i=0
while [ $i -lt 20 ]; do
	s=$(date +%s%N); rb trigger 2>/dev/null; e=$(date +%s%N)
	echo $(((e - s) / 1000)); i=$((i + 1))
done | stats
