#!/bin/sh
# bench-pool.sh LOG…: the daemon-against-script scenarios' runs pooled over
# one or more boots. Reads the verbose output of the end-to-end tests
# (NVMET_REBIND_E2E_VERBOSE=1 NVMET_REBIND_E2E_BENCH=N … go test -v ./tests/
# > LOG), takes every run's `daemon_<phase>_ms_R` and `script_<phase>_ms_R`
# metric (phase: listen, complete), and prints one line per kernel,
# scenario and phase: the number of runs a side, the pooled medians (ms
# after `rdma link add`) and their ratio. One boot moves these layouts by
# more than their difference (BENCHMARKS.md); several boots' runs pooled
# say more than any one boot's medians.
set -eu
[ $# -gt 0 ] || { echo "usage: $0 LOG…" >&2; exit 2; }
awk '
/E2E METRIC/ {
	k = $1; sc = $4; split($5, a, "="); n = a[1]; v = a[2]
	if (n ~ /^(daemon|script)_(listen|complete)_ms_[0-9]+$/) {
		sub(/_ms_[0-9]+$/, "", n)
		key = k " " sc " " n
		cnt[key]++; vals[key, cnt[key]] = v; keys[key] = 1
	}
}
function median(key,   i, j, t, m, arr) {
	m = cnt[key]
	for (i = 1; i <= m; i++) arr[i] = vals[key, i] + 0
	for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (arr[j] < arr[i]) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
	return m % 2 ? arr[(m + 1) / 2] : (arr[m / 2] + arr[m / 2 + 1]) / 2
}
END {
	for (key in keys) {
		split(key, p, " ")
		if (p[3] !~ /^daemon_/) continue
		s = p[1] " " p[2] " script_" substr(p[3], 8)
		if (!(s in cnt)) continue
		printf "%s %s %s: %d runs a side, median daemon %.1f ms, script %.1f ms, %.2fx\n",
			p[1], p[2], substr(p[3], 8), cnt[key], median(key), median(s), median(key) / median(s)
	}
}' "$@" | sort
