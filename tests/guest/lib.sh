# Shared helpers of the guest scripts (sourced by /init and every scenario).
# Scenarios run as: E2E_NAME=<name> sh -c '. /e2e/lib.sh; . <scenario>'.
# A scenario ends with pass/fail/skip (each prints the E2E RESULT line and
# exits); /init cleans up after it (cleanup_all) whatever happened.

CFG=/sys/kernel/config
N=$CFG/nvmet
T=$CFG/target
DAEMON=/usr/local/bin/nvmet-rebind
PIDS=/tmp/e2e/pids
W=/tmp/e2e/work/${E2E_NAME:-init}
mkdir -p "$PIDS" "$W"

MODULES="configfs veth dummy 8021q macvlan bonding null_blk libcrc32c rdma_rxe ib_uverbs ib_umad rdma_ucm rdma_cm nvmet nvmet-rdma nvme-fabrics nvme-rdma target_core_mod target_core_file target_core_iblock iscsi_target_mod ib_isert"

info() { echo "E2E INFO $*"; }

# log: a timestamped progress line (uptime in s, no fork).
log() {
	read -r _up _idle </proc/uptime
	echo "  [$_up] ${E2E_NAME:-init}: $*"
}

_result() {
	echo "E2E RESULT ${E2E_NAME:-unknown} $1 $2"
	echo "$1" >"/tmp/e2e/${E2E_NAME:-unknown}.result"
}
pass() { _result PASS "$*"; exit 0; }
skip() { _result SKIP "$*"; exit 0; }
fail() {
	log "FAILED: $*"
	dump_state
	_result FAIL "$*"
	exit 1
}
metric() { echo "E2E METRIC ${E2E_NAME:-unknown} $1"; }
# warn: something worth reporting that does not fail the scenario.
warn() {
	log "WARNING: $*"
	echo "E2E WARN ${E2E_NAME:-unknown} $*"
}

# run CMD…: run a command, log it and its output; return its status.
run() {
	log "\$ $*"
	"$@" >"$W/run.out" 2>&1
	_rc=$?
	sed 's/^/      /' "$W/run.out" | head -n 20
	[ $_rc -eq 0 ] || log "(exit $_rc)"
	return $_rc
}

# must CMD…: run, and fail the scenario if it fails.
must() {
	run "$@" || fail "command failed: $*"
}

dump_state() {
	echo "  ---- state at failure ----"
	echo "  # rdma link show"; rdma link show 2>&1 | sed 's/^/    /'
	echo "  # rdma resource show cm_id"; rdma resource show cm_id 2>&1 | sed 's/^/    /'
	echo "  # ip -br addr"; ip -br addr 2>&1 | sed 's/^/    /'
	echo "  # nvmet ports"
	for p in $N/ports/*; do
		[ -d "$p" ] || continue
		echo "    port $(basename "$p"): $(cat "$p/addr_traddr"):$(cat "$p/addr_trsvcid") subsystems: $(ls "$p/subsystems" | tr '\n' ' ')"
	done
	echo "  # LIO portals"
	for np in $T/iscsi/*/tpgt_*/np/*; do
		[ -d "$np" ] || continue
		echo "    $np iser=$(cat "$np/iser" 2>/dev/null)"
	done
	if daemon_alive; then
		echo "  # nvmet-rebind status"
		timeout 10 "$DAEMON" --config "$W/config.toml" --state-dir "$W/state" --run-dir "$W/run" status 2>&1 | head -n 30 | sed 's/^/    /'
	fi
	if [ -f "$W/daemon.log" ]; then
		echo "  # daemon log (last 40 lines)"
		tail -n 40 "$W/daemon.log" | sed 's/^/    /'
	fi
	echo "  # user processes (state, wchan, kernel stack of the blocked ones)"
	for _d in /proc/[0-9]*; do
		_cmd=$(tr '\0' ' ' <"$_d/cmdline" 2>/dev/null)
		[ -n "$_cmd" ] || continue
		_st=$(sed -n 's/^State:[[:space:]]*//p' "$_d/status" 2>/dev/null)
		echo "    ${_d#/proc/} [$_st] wchan=$(cat "$_d/wchan" 2>/dev/null) $_cmd" | cut -c1-200
		case $_st in
		D*) sed 's/^/        /' "$_d/stack" 2>/dev/null ;;
		esac
	done
	# Where the daemon's goroutines are (a round stuck in a kernel call or
	# on a lock shows here): SIGQUIT makes the Go runtime print them and
	# exit; the scenario has failed already.
	if daemon_alive; then
		kill -QUIT "$DAEMON_PID" 2>/dev/null
		sleep 1
		echo "  # daemon goroutines (SIGQUIT)"
		sed -n '/^SIGQUIT/,$p' "$W/daemon.log" | grep -v '^\s*$' | head -n 200 | sed 's/^/    /'
	fi
	if dmesg | grep -q 'blocked for more than'; then
		echo "  # the kernel's hung-task reports"
		dmesg | grep -A 12 'blocked for more than' | head -n 60 | sed 's/^/    /'
	fi
	echo "  # dmesg (last 25 lines)"
	dmesg | tail -n 25 | sed 's/^/    /'
	echo "  ---- end of state ----"
}

load_modules() {
	for m in $MODULES; do
		case $m in
		null_blk) modprobe null_blk nr_devices=4 || return 1 ;;
		dummy) modprobe dummy numdummies=0 || return 1 ;;
		# bonding would create a bond0 by itself.
		bonding) modprobe bonding max_bonds=0 || return 1 ;;
		*) modprobe "$m" || { echo "modprobe $m failed"; return 1; } ;;
		esac
	done
	# crc32 is not a declared dependency of rdma_rxe: load it now.
	modprobe crypto-crc32 2>/dev/null || modprobe crc32_generic 2>/dev/null
	modprobe crypto-crc32c 2>/dev/null || modprobe crc32c_generic 2>/dev/null
	if modinfo siw >/dev/null 2>&1; then
		modprobe siw && info "siw loaded" || info "siw present but does not load"
	fi
	grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs configfs $CFG
	return 0
}

have_siw() { [ -d /sys/module/siw ]; }

# ---- network ----------------------------------------------------------------

# veth A B: a veth pair, both ends up.
veth() {
	ip link add "$1" type veth peer name "$2" && ip link set "$1" up && ip link set "$2" up
}
addr() {
	case "$2" in
	*:*) ip -6 addr add "$2" dev "$1" nodad ;;
	*) ip addr add "$2" dev "$1" ;;
	esac
}
rxe_add() { rdma link add "$1" type rxe netdev "$2"; }
siw_add() { rdma link add "$1" type siw netdev "$2"; }
# rdev_add TYPE NAME NETDEV
rdev_add() { rdma link add "$2" type "$1" netdev "$3"; }
rdma_del() { rdma link delete "$1"; }
# flap_rxe N: rxe0 (on veth0) deleted and re-added N times back to back; a
# slow flap is logged (a hang shows as the scenario's last line).
flap_rxe() {
	_i=1
	while [ $_i -le "$1" ]; do
		_tf=$(now)
		rdma_del rxe0 || fail "flap $_i: rdma link delete"
		rxe_add rxe0 veth0 || fail "flap $_i: rdma link add"
		_tf=$(( ($(now) - _tf) / 1000 ))
		[ $_tf -lt 2000 ] || log "flap $_i took $_tf ms"
		_i=$((_i + 1))
	done
}

# ---- nvmet --------------------------------------------------------------------

# nvmet_subsys NQN [DEVICE]
nvmet_subsys() {
	mkdir "$N/subsystems/$1" || return 1
	echo 1 >"$N/subsystems/$1/attr_allow_any_host" || return 1
	mkdir "$N/subsystems/$1/namespaces/1" || return 1
	echo "${2:-/dev/nullb0}" >"$N/subsystems/$1/namespaces/1/device_path" || return 1
	echo 1 >"$N/subsystems/$1/namespaces/1/enable"
}

# nvmet_port ID ADDR SVC
# nvmet_port ID ADDR SVC [TRTYPE]: a port (rdma unless TRTYPE says tcp).
nvmet_port() {
	_fam=ipv4
	case "$2" in *:*) _fam=ipv6 ;; esac
	mkdir "$N/ports/$1" || return 1
	echo "${4:-rdma}" >"$N/ports/$1/addr_trtype" &&
		echo $_fam >"$N/ports/$1/addr_adrfam" &&
		echo "$2" >"$N/ports/$1/addr_traddr" &&
		echo "$3" >"$N/ports/$1/addr_trsvcid"
}
nvmet_link() { ln -s "$N/subsystems/$2" "$N/ports/$1/subsystems/$2"; }
nvmet_unlink() { rm "$N/ports/$1/subsystems/$2"; }
nvmet_linked() { [ -L "$N/ports/$1/subsystems/$2" ]; }
# links_order PORT: the port's subsystem links in configfs readdir order.
links_order() { find "$N/ports/$1/subsystems" -mindepth 1 -maxdepth 1 | sed 's|.*/||' | tr '\n' ' '; }

# discover ADDR SVC [NQN]: nvme discover over RDMA works (and lists NQN).
# discover ADDR SVC [NQN] [TRTYPE]: nvme discover over rdma (or TRTYPE);
# with NQN, it must be in the log page.
discover() {
	nvme discover -t "${4:-rdma}" -a "$1" -s "$2" >"$W/discover.out" 2>&1 || {
		sed 's/^/      discover: /' "$W/discover.out" | head -n 5
		return 1
	}
	[ -z "$3" ] || grep -q "subnqn: *$3\$" "$W/discover.out" || {
		log "discover: $3 not in the log page"
		sed 's/^/      discover: /' "$W/discover.out" | head -n 20
		return 1
	}
}

# ---- LIO ------------------------------------------------------------------------

# lio_target IQN: a target with a fileio LUN, tpgt_1, demo mode.
lio_target() {
	_tpg=$T/iscsi/$1/tpgt_1
	_bs=$T/core/fileio_0/disk_$(echo "$1" | tr -c 'a-zA-Z0-9\n' '_')
	mkdir -p "$T/core/fileio_0" || return 1
	if [ ! -d "$_bs" ]; then
		truncate -s 64M "/tmp/$(basename "$_bs").img" &&
			mkdir "$_bs" &&
			echo "fd_dev_name=/tmp/$(basename "$_bs").img,fd_dev_size=67108864" >"$_bs/control" &&
			echo 1 >"$_bs/enable" || return 1
	fi
	mkdir -p "$_tpg" && mkdir "$_tpg/lun/lun_0" &&
		ln -s "$_bs" "$_tpg/lun/lun_0/disk0" &&
		echo 1 >"$_tpg/attrib/generate_node_acls" &&
		echo 0 >"$_tpg/attrib/authentication" &&
		echo 0 >"$_tpg/attrib/demo_mode_write_protect" &&
		echo 1 >"$_tpg/enable"
}

# np_name ADDR PORT: the np directory name (IPv6 in brackets).
np_name() {
	case "$1" in
	*:*) echo "[$1]:$2" ;;
	*) echo "$1:$2" ;;
	esac
}
# lio_portal IQN ADDR PORT: an np with iser=1.
lio_portal() {
	_np=$T/iscsi/$1/tpgt_1/np/$(np_name "$2" "$3")
	mkdir "$_np" && echo 1 >"$_np/iser"
}
lio_iser() { cat "$T/iscsi/$1/tpgt_1/np/$(np_name "$2" "$3")/iser"; }
lio_set_iser() { echo "$4" >"$T/iscsi/$1/tpgt_1/np/$(np_name "$2" "$3")/iser"; }

# target_pair ADDR NQN IQN: the set-up most scenarios share — rxe0 on veth0
# holding ADDR/24, nvmet port 1 (ADDR:4420) exporting NQN, and a LIO portal
# ADDR:3260 of IQN with iser=1.
target_pair() {
	must veth veth0 veth1
	must addr veth0 "$1/24"
	must rxe_add rxe0 veth0
	must nvmet_subsys "$2"
	must nvmet_port 1 "$1" 4420
	must nvmet_link 1 "$2"
	must lio_target "$3"
	must lio_portal "$3" "$1" 3260
}

# ---- listeners --------------------------------------------------------------------

# listening COMM ADDR PORT [DEV]: a bound LISTEN cm_id exists now.
listening() {
	if [ -n "$4" ]; then
		e2eutil listening -comm "$1" -addr "$2" -port "$3" -dev "$4"
	else
		e2eutil listening -comm "$1" -addr "$2" -port "$3"
	fi
}
# wait_listen COMM ADDR PORT TIMEOUT_S [SINCE_US]: prints ms since SINCE.
wait_listen() {
	e2eutil wait-listen -comm "$1" -addr "$2" -port "$3" -timeout "${4:-10}s" ${5:+-since "$5"}
}
# wait_gone COMM ADDR PORT TIMEOUT_S
wait_gone() {
	e2eutil wait-listen -absent -comm "$1" -addr "$2" -port "$3" -timeout "${4:-10}s" >/dev/null
}
now() { e2eutil now; }
# up_cs VAR: sets VAR to /proc/uptime in centiseconds without a fork, to
# time a step inside a measured window (10 ms steps).
up_cs() {
	read -r _up _ </proc/uptime
	eval "$1=\$(( \${_up%.*} * 100 + 1\${_up#*.} - 100 ))"
}

# ---- the daemon --------------------------------------------------------------------

need_daemon() {
	[ -x "$DAEMON" ] || fail "nvmet-rebind binary not available: $(head -n 1 /e2e/daemon-missing 2>/dev/null)"
}

# write_config [GIVE_UP] [SUBNETS…]: writes $W/config.toml. PIN_DEVICE=true
# in the environment sets [policy] pin_device (default false).
write_config() {
	_gu=${1:-0}
	[ $# -gt 0 ] && shift
	[ $# -gt 0 ] || set -- 192.0.2.0/24 198.51.100.0/24 203.0.113.0/24 2001:db8::/64
	: >"$W/config.toml"
	for _s in "$@"; do
		printf '[[watch]]\nsubnet = "%s"\n\n' "$_s" >>"$W/config.toml"
	done
	printf '[policy]\ngive_up_after = "%s"\npin_device = %s\nresync_interval = "30s"\n' "$_gu" "${PIN_DEVICE:-false}" >>"$W/config.toml"
}

# rb ARGS…: the nvmet-rebind CLI with this scenario's config and state dir.
rb() {
	"$DAEMON" --config "$W/config.toml" --state-dir "$W/state" --run-dir "$W/run" "$@"
}

# daemon_start [VAR=VALUE…]: start the daemon in the background; wait for
# its control socket. The environment words are passed through env;
# DAEMON_ARGS are added to `run` (e.g. --no-watch).
daemon_start() {
	need_daemon
	[ -f "$W/config.toml" ] || write_config
	mkdir -p "$W/state"
	echo "---- daemon start $* ----" >>"$W/daemon.log"
	# shellcheck disable=SC2086 # DAEMON_ARGS: extra words for `run`
	env "$@" "$DAEMON" --config "$W/config.toml" --state-dir "$W/state" --run-dir "$W/run" --log-level debug run $DAEMON_ARGS >>"$W/daemon.log" 2>&1 &
	DAEMON_PID=$!
	echo $DAEMON_PID >"$PIDS/daemon-$DAEMON_PID"
	_i=0
	while [ $_i -lt 100 ]; do
		kill -0 $DAEMON_PID 2>/dev/null || {
			log "daemon exited at start:"
			tail -n 20 "$W/daemon.log" | sed 's/^/      /'
			return 1
		}
		[ -S "$W/run/control.sock" ] && break
		sleep 0.1
		_i=$((_i + 1))
	done
	# Let it finish its first reconcile and subscribe to events (TCG is slow).
	sleep 1
	log "daemon running, pid $DAEMON_PID"
}

# daemon_wait_exit TIMEOUT_S: wait for the daemon to exit; prints its status.
daemon_wait_exit() {
	_i=0
	while kill -0 "$DAEMON_PID" 2>/dev/null; do
		[ $_i -ge $(($1 * 10)) ] && return 1
		sleep 0.1
		_i=$((_i + 1))
	done
	wait "$DAEMON_PID"
	DAEMON_RC=$?
	rm -f "$PIDS/daemon-$DAEMON_PID"
	return 0
}

daemon_stop() {
	[ -n "$DAEMON_PID" ] || return 0
	kill -TERM "$DAEMON_PID" 2>/dev/null
	daemon_wait_exit 10 || { kill -KILL "$DAEMON_PID" 2>/dev/null; daemon_wait_exit 5; }
	DAEMON_PID=
}

daemon_alive() { [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; }

# ---- scenario runner and cleanup ------------------------------------------------------

run_scenario() {
	_name=$1
	_f=
	# name@N is the Nth run of name (NVMET_REBIND_E2E_REPEAT).
	for _c in /e2e/scenarios/[0-9][0-9]-"${_name%@*}".sh; do [ -f "$_c" ] && _f=$_c; done
	echo "E2E BEGIN $_name"
	if [ -z "$_f" ]; then
		echo "E2E RESULT $_name FAIL no such scenario script"
		return 1
	fi
	rm -f "/tmp/e2e/$_name.result"
	_t0=$(e2eutil now)
	# A scenario long by design declares its limit: "# e2e-limit: <s>"
	# (the harness adds it to the boot's).
	_lim=$(sed -n 's/^# e2e-limit: *\([0-9][0-9]*\).*/\1/p' "$_f" | head -n 1)
	_lim=${E2E_TIMEOUT:-${_lim:-300}}
	E2E_NAME=$_name timeout -s KILL "$_lim" /bin/dash -c ". /e2e/lib.sh; . $_f"
	_rc=$?
	if [ ! -f "/tmp/e2e/$_name.result" ]; then
		E2E_NAME=$_name W=/tmp/e2e/work/$_name dump_state
		echo "E2E RESULT $_name FAIL ended (exit $_rc; 137 = killed by the ${_lim}s timeout) without a verdict"
		echo FAIL >"/tmp/e2e/$_name.result"
	fi
	echo "E2E METRIC $_name wall_ms=$(e2eutil since "$_t0")"
	cleanup_all >"/tmp/e2e/$_name.cleanup" 2>&1
	if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ] || [ -n "$(ls $N/ports 2>/dev/null)" ]; then
		echo "  cleanup after $_name left state behind:"
		sed 's/^/    /' "/tmp/e2e/$_name.cleanup" | tail -n 20
	fi
	[ "$(cat "/tmp/e2e/$_name.result")" != FAIL ]
}

# cleanup_all: stop daemons and host connections, remove every LIO and nvmet
# object, every RDMA link and every netdev but lo.
cleanup_all() {
	for _p in "$PIDS"/daemon-*; do
		[ -f "$_p" ] || continue
		kill -KILL "$(cat "$_p")" 2>/dev/null
		rm -f "$_p"
	done
	nvme disconnect-all >/dev/null 2>&1
	iscsi_cleanup
	for _tpg in $T/iscsi/*/tpgt_*; do
		[ -d "$_tpg" ] || continue
		echo 0 >"$_tpg/enable" 2>/dev/null
		for _np in "$_tpg"/np/*; do
			[ -d "$_np" ] || continue
			echo 0 >"$_np/iser" 2>/dev/null
			rmdir "$_np"
		done
		# Mapped LUNs link the TPG's LUNs: they go first.
		for _a in "$_tpg"/acls/*; do
			[ -d "$_a" ] || continue
			for _m in "$_a"/lun_*; do
				[ -d "$_m" ] || continue
				for _s in "$_m"/*; do [ -L "$_s" ] && rm "$_s"; done
				rmdir "$_m"
			done
			rmdir "$_a"
		done
		for _l in "$_tpg"/lun/lun_*; do
			[ -d "$_l" ] || continue
			for _s in "$_l"/*; do [ -L "$_s" ] && rm "$_s"; done
			rmdir "$_l"
		done
		rmdir "$_tpg"
	done
	for _i in $T/iscsi/iqn.* $T/iscsi/eui.*; do [ -d "$_i" ] && rmdir "$_i"; done
	for _b in $T/core/*_*/*; do [ -d "$_b" ] && rmdir "$_b"; done
	for _h in $T/core/*_*; do [ -d "$_h" ] && rmdir "$_h"; done
	rm -f /tmp/disk_*.img
	for _l in $N/ports/*/subsystems/*; do [ -L "$_l" ] && rm "$_l"; done
	for _l in $N/ports/*/referrals/*; do [ -d "$_l" ] && rmdir "$_l"; done
	for _l in $N/ports/*/ana_groups/*; do [ -d "$_l" ] && [ "${_l##*/}" != 1 ] && rmdir "$_l"; done
	for _p in $N/ports/*; do [ -d "$_p" ] && rmdir "$_p"; done
	for _s in $N/subsystems/*; do
		[ -d "$_s" ] || continue
		for _h in "$_s"/allowed_hosts/*; do [ -L "$_h" ] && rm "$_h"; done
		for _n in "$_s"/namespaces/*; do
			[ -d "$_n" ] || continue
			echo 0 >"$_n/enable"
			rmdir "$_n"
		done
		rmdir "$_s"
	done
	for _h in $N/hosts/*; do [ -d "$_h" ] && rmdir "$_h"; done
	for _b in $CFG/nullb/*; do
		[ -d "$_b" ] || continue
		echo 0 >"$_b/power"
		rmdir "$_b"
	done
	for _d in /sys/class/infiniband/*; do
		[ -e "$_d" ] && rdma link delete "$(basename "$_d")"
	done
	for _i in /sys/class/net/*; do
		_n=$(basename "$_i")
		[ "$_n" = lo ] || ip link del "$_n" 2>/dev/null
	done
	rm -rf "/tmp/e2e/work/${E2E_NAME:-none}/state"
	return 0
}

# status_of KIND ID: the `status --json` line of one listener (e2eutil status
# format: kind=… id=… address=… … reason="…").
status_of() {
	rb status --json >"$W/status.json" 2>"$W/status.err" || {
		log "status --json failed: $(cat "$W/status.err")"
		return 1
	}
	e2eutil status <"$W/status.json" | grep -F "kind=$1 id=$2 "
}

# check_rc: the exit code of `nvmet-rebind check`.
check_rc() {
	rb check >"$W/check.out" 2>&1
	_c=$?
	sed 's/^/      check: /' "$W/check.out" | head -n 5
	return $_c
}

# ctrl_count: nvmet controllers created so far (target side, from dmesg).
ctrl_count() { dmesg | grep -c 'nvmet: creating .*controller'; }
# port_enables ID: how often nvmet-rdma enabled port ID (dmesg).
port_enables() { dmesg | grep -c "nvmet_rdma: enabling port $1 "; }

# ---- daemon against the script (the *-scale scenarios) ------------------------------

# bench_blocks: runs the scenario's daemon_run R and script_run R in blocks
# daemon, script, script, daemon (so load that drifts through the boot lands
# on both sides), E2E_BENCH runs of each (at least 2, an odd number rounded
# up); BENCH_N is then the runs of each. Each run appends its figures to
# $W/daemon_listen, daemon_complete, script_listen, script_complete.
bench_blocks() {
	BENCH_N=0
	while [ $BENCH_N -lt "${E2E_BENCH:-0}" ] || [ $BENCH_N -lt 2 ]; do
		daemon_run $((BENCH_N + 1))
		script_run $((BENCH_N + 1))
		script_run $((BENCH_N + 2))
		daemon_run $((BENCH_N + 2))
		BENCH_N=$((BENCH_N + 2))
	done
}

# bench_medians: the stats of those four files as metrics (NAME_median=…),
# and each median in M_NAME.
bench_medians() {
	for _bm in daemon_listen daemon_complete script_listen script_complete; do
		_bst=$(e2eutil stats $(cat "$W/$_bm"))
		log "$_bm: $_bst"
		for _bkv in $_bst; do metric "${_bm}_$_bkv"; done
		eval "M_$_bm=$(echo "$_bst" | sed 's/.*median=\([^ ]*\).*/\1/')"
	done
}

# ---- shared iSER listeners (shared-iser-* scenarios) ------------------------------
# One kernel iSER listener serves every TPG portal with the same address:port
# and iser=1, across targets (KERNEL.md). These helpers take the address, the
# port, then the IQNs of the sharers (tpgt_1 each). They use shell builtins
# only in their loops (no fork per sharer: 256 sharers under TCG).

# lio_np IQN ADDR PORT: the np directory of IQN's tpgt_1.
lio_np() { echo "$T/iscsi/$1/tpgt_1/np/$(np_name "$2" "$3")"; }

# lio_bare_portal IQN ADDR PORT: a target with tpgt_1 and one np with iser=1,
# no LUN, TPG not enabled (iser=1 listens anyway): the cheap sharer.
lio_bare_portal() {
	_np=$(lio_np "$1" "$2" "$3")
	mkdir -p "$_np" && echo 1 >"$_np/iser"
}

# isers ADDR PORT IQN…: "iqn=value" of every sharer on one line ("gone" when
# the np does not exist).
isers() {
	_n=$(np_name "$1" "$2")
	shift 2
	_out=
	for _q in "$@"; do
		_v=gone
		[ -f "$T/iscsi/$_q/tpgt_1/np/$_n/iser" ] && read -r _v <"$T/iscsi/$_q/tpgt_1/np/$_n/iser"
		_out="$_out $_q=$_v"
	done
	echo "${_out# }"
}

# all_iser WANT ADDR PORT IQN…: every sharer's iser reads WANT; otherwise
# prints those that do not (iqn=value, "gone" for a missing np), returns 1.
# wait_iser WANT ADDR PORT SECONDS IQN…: poll until every IQN's portal on
# ADDR:PORT reads iser WANT; on timeout print the others and return 1.
wait_iser() {
	_wi_want=$1 _wi_a=$2 _wi_p=$3 _wi_s=$4
	shift 4
	_wi_i=0
	until _wi_bad=$(all_iser "$_wi_want" "$_wi_a" "$_wi_p" "$@"); do
		[ $_wi_i -ge $((_wi_s * 10)) ] && { echo "$_wi_bad"; return 1; }
		sleep 0.1
		_wi_i=$((_wi_i + 1))
	done
}

all_iser() {
	_want=$1
	_n=$(np_name "$2" "$3")
	shift 3
	_bad=
	for _q in "$@"; do
		_v=gone
		[ -f "$T/iscsi/$_q/tpgt_1/np/$_n/iser" ] && read -r _v <"$T/iscsi/$_q/tpgt_1/np/$_n/iser"
		[ "$_v" = "$_want" ] || _bad="$_bad $_q=$_v"
	done
	[ -z "$_bad" ] && return 0
	echo "${_bad# }"
	return 1
}

# set_isers VALUE ADDR PORT IQN…: write VALUE to every sharer's iser, in
# order. Stops at the first refused write (returns 1).
set_isers() {
	_val=$1
	_n=$(np_name "$2" "$3")
	shift 3
	for _q in "$@"; do
		echo "$_val" >"$T/iscsi/$_q/tpgt_1/np/$_n/iser" || return 1
	done
}

# status_field LINE KEY: the value of KEY in an e2eutil status line (quotes
# of string values with blanks removed; empty when absent or empty).
status_field() {
	printf ' %s\n' "$1" | sed -n "s/.* $2=\"\\([^\"]*\\)\".*/\\1/p; t; s/.* $2=\\([^ ]*\\).*/\\1/p"
}

# status_expect PHASE KIND ID KEY=VALUE…: the `status --json` entry of one
# listener has these values; fails the scenario naming the first that differs.
status_expect() {
	_ph=$1 _k=$2 _id=$3
	shift 3
	_l=$(status_of "$_k" "$_id") || fail "$_ph: status --json has no $_k listener '$_id' (ids: $(e2eutil status <"$W/status.json" 2>/dev/null | sed 's/.* id=\([^ ]*\) .*/\1/' | head -n 8 | tr '\n' ' '))"
	for _kv in "$@"; do
		_key=${_kv%%=*}
		_want=${_kv#*=}
		_got=$(status_field "$_l" "$_key")
		[ "$_got" = "$_want" ] || fail "$_ph: status --json of $_k '$_id': $_key is '$_got', want '$_want' (entry: $_l)"
	done
}

# ---- late disks (boot completion) -------------------------------------------------------

# late_disk NAME: a null_blk device made now through its configfs (a disk
# that comes late); prints its /dev path: named after its configfs item on
# newer kernels, nullb<index> on older ones. cleanup_all removes it.
late_disk() {
	mkdir "$CFG/nullb/$1" && echo 1 >"$CFG/nullb/$1/power" || return 1
	_i=0
	while :; do
		[ -b "/dev/$1" ] && echo "/dev/$1" && return 0
		_d=/dev/nullb$(cat "$CFG/nullb/$1/index")
		[ -b "$_d" ] && echo "$_d" && return 0
		[ $_i -ge 50 ] && return 1
		sleep 0.1
		_i=$((_i + 1))
	done
}

# ---- iSCSI/TCP initiator (open-iscsi) -----------------------------------------------

# iscsid_start: open-iscsi's iscsid in the foreground, in its own session
# (on SIGTERM it signals its whole process group); pid in $PIDS so that
# cleanup_all logs every session out and ends it.
iscsid_start() {
	modprobe iscsi_tcp || return 1
	modprobe sd_mod || return 1
	mkdir -p /run/lock/iscsi /etc/iscsi/nodes /etc/iscsi/send_targets /etc/iscsi/ifaces
	setsid iscsid -f >>"$W/iscsid.log" 2>&1 &
	ISCSID_PID=$!
	echo $ISCSID_PID >"$PIDS/iscsid-$ISCSID_PID"
	_i=0
	while [ $_i -lt 50 ]; do
		# 0 = sessions, 21 = none: either way iscsid answers.
		iscsiadm -m session >/dev/null 2>&1
		case $? in 0 | 21) return 0 ;; esac
		kill -0 $ISCSID_PID 2>/dev/null || return 1
		sleep 0.1
		_i=$((_i + 1))
	done
	return 1
}

# iscsi_cleanup: log every iSCSI session out and stop iscsid (cleanup_all).
iscsi_cleanup() {
	for _p in "$PIDS"/iscsid-*; do
		[ -f "$_p" ] || continue
		iscsiadm -m node -U all >/dev/null 2>&1
		kill -TERM "$(cat "$_p")" 2>/dev/null
		sleep 0.2
		kill -KILL "$(cat "$_p")" 2>/dev/null
		rm -f "$_p"
	done
}

# ---- carriers, address moves, hosts (layout scenarios 30-37) ------------------------
# rdma_cm binds a listener to the RDMA port whose RoCE GID table holds the
# address (IPv4 as ::ffff:a.b.c.d), whatever netdev the address is on: a VLAN,
# a macvlan or a bond above the device's netdev.

# gid_v4 ADDR: the GID of an IPv4 address as sysfs prints it.
gid_v4() {
	# shellcheck disable=SC2046
	set -- $(echo "$1" | tr . ' ')
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$1" "$2" "$3" "$4"
}

# gid_entries ADDR: "dev/port index ndev type" of every GID table entry that
# holds ADDR (IPv4), one a line.
gid_entries() {
	grep -slx "$(gid_v4 "$1")" /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null |
		while read -r _f; do
			_i=${_f##*/} _p=${_f%/gids/*}
			_d=${_p%/ports/*}
			echo "${_d##*/}/${_p##*/} $_i $(cat "$_p/gid_attrs/ndevs/$_i" 2>/dev/null) $(cat "$_p/gid_attrs/types/$_i" 2>/dev/null)"
		done
}

# gid_carriers ADDR: the "dev/port" that carry ADDR now, sorted, one a line.
gid_carriers() { gid_entries "$1" | cut -d' ' -f1 | sort -u; }

# wait_carrier ADDR DEV/PORT TIMEOUT_S: until DEV/PORT is the only carrier.
wait_carrier() {
	_i=0
	while [ "$(gid_carriers "$1")" != "$2" ]; do
		[ $_i -ge $(($3 * 5)) ] && return 1
		sleep 0.2
		_i=$((_i + 1))
	done
}

# move_addr ADDR/LEN FROM TO: the address leaves netdev FROM for TO (an HA
# address move, an admin's re-addressing).
move_addr() {
	log "address ${1%/*}: $2 -> $3"
	ip addr del "$1" dev "$2" && addr "$3" "$1"
}

# cmid_line COMM ADDR PORT: the `rdma resource show cm_id` LISTEN line(s) of
# that listener; its cm-idn changes whenever the listener is re-created.
cmid_line() {
	rdma resource show cm_id 2>/dev/null | grep " state LISTEN .*comm \[$1\] .*src-addr $2:$3 " |
		sed 's/ *dev-type.*//; s/ *ps TCP//'
}

# host_connect ADDR SVC NQN: `nvme connect` over RDMA, then wait for the
# namespace's block device; sets CTRL (nvmeN).
host_connect() {
	CTRL=
	run nvme connect -t rdma -a "$1" -s "$2" -n "$3" || return 1
	for _i in $(seq 50); do
		for _c in /sys/class/nvme/nvme*; do
			[ -e "$_c/subsysnqn" ] && [ "$(cat "$_c/subsysnqn")" = "$3" ] && CTRL=${_c##*/}
		done
		[ -n "$CTRL" ] && [ -b "/dev/${CTRL}n1" ] && return 0
		sleep 0.1
	done
	log "no block device for $3 after nvme connect"
	return 1
}
# host_io: read 1 MiB from $CTRL's namespace.
host_io() { run dd if="/dev/${CTRL}n1" of=/dev/null bs=64k count=16; }
# host_disconnect NQN
host_disconnect() { run nvme disconnect -n "$1"; }
