# gid-table: which RDMA device carries an address is decided by the RoCE GID
# table, not by the netdev under the device. rxe0 on veth0 with 192.0.2.1 on
# the VLAN veth0.100, 198.51.100.1 on the macvlan mv0 and 2001:db8::1 on veth0
# (and, when siw.ko is there, siw0 on veth2 with 203.0.113.1, 203.0.113.2 on
# the VLAN veth2.200 and 203.0.113.3 on the macvlan mv2): prints every
# non-zero GID entry as
#   E2E INFO gid <dev> <port> <index> <gid> <ndev|-> <type|->
# (the source of rebind/rdma/testdata/sysfs-gid-<kernel>), what reading
# ndevs/types of an empty or netdev-less entry returns, how long the entries
# take to appear, and asserts that nvmet ports on those addresses listen on
# the device the table names (and that the macvlan on siw0's netdev binds
# nowhere).
NQN=nqn.2024-01.io.e2e:gid
IB=/sys/class/infiniband
ZERO=0000:0000:0000:0000:0000:0000:0000:0000
G1=0000:0000:0000:0000:0000:ffff:c000:0201 # ::ffff:192.0.2.1
G2=0000:0000:0000:0000:0000:ffff:c633:6401 # ::ffff:198.51.100.1
G3=2001:0db8:0000:0000:0000:0000:0000:0001 # 2001:db8::1
G4=0000:0000:0000:0000:0000:ffff:c000:0202 # ::ffff:192.0.2.2

# gid_on DEV GID NDEV: port 1 of DEV has an entry GID on NDEV, among
# entries 0-15, read with shell builtins only (no fork: a poll costs about
# a millisecond, not the ~60 ms of a grep under TCG). A new entry takes the
# lowest free index (find_gid in drivers/infiniband/core/cache.c), and this
# scenario has a handful.
gid_on() {
	_i=0
	while [ $_i -lt 16 ]; do
		_g=
		read -r _g <"$IB/$1/ports/1/gids/$_i" 2>/dev/null
		if [ "$_g" = "$2" ]; then
			_nd=
			read -r _nd <"$IB/$1/ports/1/gid_attrs/ndevs/$_i" 2>/dev/null
			[ "$_nd" = "$3" ] && return 0
		fi
		_i=$((_i + 1))
	done
	return 1
}
# wait_gid DEV GID NDEV SINCE_US: poll gid_on without a pause (bounded 5 s);
# prints "<ms since SINCE> <failed polls before>" (0: there at once).
wait_gid() {
	_n=0
	until gid_on "$1" "$2" "$3"; do
		_n=$((_n + 1))
		if [ $((_n % 100)) = 0 ]; then
			_ms=$(e2eutil since "$4")
			[ "${_ms%.*}" -ge 5000 ] && return 1
		fi
	done
	echo "$(e2eutil since "$4") $_n"
}
# fill NAME RESULT: the metric and a line for a wait_gid result.
fill() {
	metric "gid_fill_ms_$1=${2% *}"
	info "gid fill $1: ${2% *} ms, after ${2#* } failed polls"
}
# dump_gids DEV: one INFO line per non-zero entry of every port, in index order.
dump_gids() {
	for _p in $IB/$1/ports/*; do
		_pn=${_p##*/}
		for _f in $(grep -Lx $ZERO "$_p"/gids/* | sort -t/ -k9n); do
			_i=${_f##*/}
			read -r _g <"$_f"
			read -r _nd <"$_p/gid_attrs/ndevs/$_i" 2>/dev/null || _nd=-
			read -r _ty <"$_p/gid_attrs/types/$_i" 2>/dev/null || _ty=-
			info "gid $1 $_pn $_i $_g $_nd $(echo "$_ty" | tr ' ' _)"
		done
	done
}
# read_errors DEV INDEX: what reading the entry's attributes returns.
read_errors() {
	for _a in gids gid_attrs/ndevs gid_attrs/types; do
		_out=$(cat "$IB/$1/ports/1/$_a/$2" 2>&1)
		info "gidread $1 1 $2 $_a rc=$? $(echo "$_out" | tr '\n' ' ')"
	done
}

must veth veth0 veth1
must ip link add link veth0 name veth0.100 type vlan id 100
must ip link set veth0.100 up
must ip link add link veth0 name mv0 type macvlan mode bridge
must ip link set mv0 up
must addr veth0.100 192.0.2.1/24
must addr mv0 198.51.100.1/24

t0=$(now)
rxe_add rxe0 veth0 || fail "rdma link add rxe0 failed"
r=$(wait_gid rxe0 $G1 veth0.100 "$t0") || { dump_gids rxe0; fail "no GID ::ffff:192.0.2.1 on veth0.100 5 s after rdma link add"; }
fill link_add_vlan "$r"
r=$(wait_gid rxe0 $G2 mv0 "$t0") || { dump_gids rxe0; fail "no GID ::ffff:198.51.100.1 on mv0 5 s after rdma link add"; }
fill link_add_macvlan "$r"
info "rxe0 port 1 GID table: $(ls $IB/rxe0/ports/1/gids | wc -l) entries"
t0=$(now)
k=0
while [ $k -lt 100 ]; do
	gid_on rxe0 $G3 veth0
	k=$((k + 1))
done
info "one gid_on poll takes $(($(e2eutil now) - t0)) us / 100 here"

t0=$(now)
addr veth0 2001:db8::1/64 || fail "ip addr add 2001:db8::1 failed"
r=$(wait_gid rxe0 $G3 veth0 "$t0") || { dump_gids rxe0; fail "no GID 2001:db8::1 on veth0 5 s after ip addr add"; }
fill addr_add_v6 "$r"
t0=$(now)
addr veth0.100 192.0.2.2/24 || fail "ip addr add 192.0.2.2 failed"
r=$(wait_gid rxe0 $G4 veth0.100 "$t0") || { dump_gids rxe0; fail "no GID ::ffff:192.0.2.2 on veth0.100 5 s after ip addr add"; }
fill addr_add_v4 "$r"
t0=$(now)
ip addr del 192.0.2.2/24 dev veth0.100 || fail "ip addr del 192.0.2.2 failed"
_n=0
while gid_on rxe0 $G4 veth0.100; do
	_n=$((_n + 1))
	if [ $((_n % 100)) = 0 ]; then
		_ms=$(e2eutil since "$t0")
		[ "${_ms%.*}" -ge 5000 ] && fail "GID ::ffff:192.0.2.2 still there 5 s after ip addr del"
	fi
done
info "gid removal addr_del_v4: $(e2eutil since "$t0") ms, after $_n polls that still found it"

SIW=0
if have_siw; then
	must veth veth2 veth3
	must addr veth2 203.0.113.1/24
	t0=$(now)
	siw_add siw0 veth2 || fail "rdma link add siw0 failed"
	_n=0
	while :; do
		_g=
		read -r _g <$IB/siw0/ports/1/gids/0 2>/dev/null
		[ -n "$_g" ] && [ "$_g" != $ZERO ] && break
		_n=$((_n + 1))
		if [ $((_n % 100)) = 0 ]; then
			_ms=$(e2eutil since "$t0")
			[ "${_ms%.*}" -ge 5000 ] && fail "siw0 has no GID 0 5 s after rdma link add"
		fi
	done
	fill link_add_siw "$(e2eutil since "$t0") $_n"
	info "siw0 port 1 GID table: $(ls $IB/siw0/ports/1/gids | wc -l) entries"
	# iWARP has no per-IP entries: an address on a VLAN of veth2 and one
	# on a macvlan of veth2 (see the nvmet ports 5 and 6 below).
	must ip link add link veth2 name veth2.200 type vlan id 200
	must ip link set veth2.200 up
	must ip link add link veth2 name mv2 type macvlan mode bridge
	must ip link set mv2 up
	must addr veth2.200 203.0.113.2/24
	must addr mv2 203.0.113.3/24
	SIW=1
else
	info "siw not available: $(cat /e2e/siw-missing 2>/dev/null || echo 'does not load')"
fi

info "kernel $(uname -r)"
for _d in $IB/*; do
	info "device ${_d##*/} node_guid $(cat "$_d/node_guid") node_type $(cat "$_d/node_type" | tr ' ' _) link_layer $(cat "$_d/ports/1/link_layer") ports $(ls "$_d/ports" | tr '\n' ' ')"
done
for _n in veth0 veth0.100 mv0 veth2 veth2.200 mv2; do
	[ -e /sys/class/net/$_n ] && info "netdev $_n ifindex $(cat /sys/class/net/$_n/ifindex) address $(cat /sys/class/net/$_n/address)"
done
dump_gids rxe0
[ $SIW = 1 ] && dump_gids siw0

# The errno of an empty entry (the last index is never used here) and of
# the entries without a netdev.
last=$(ls $IB/rxe0/ports/1/gids | sort -n | tail -n 1)
read_errors rxe0 "$last"
if [ $SIW = 1 ]; then
	read_errors siw0 0
fi

must nvmet_subsys $NQN
must nvmet_port 1 192.0.2.1 4420
must nvmet_port 2 198.51.100.1 4421
must nvmet_port 3 2001:db8::1 4423
for p in 1 2 3; do must nvmet_link $p $NQN; done
listening nvmet_rdma 192.0.2.1 4420 rxe0 || fail "192.0.2.1:4420 (on the VLAN veth0.100) does not listen on rxe0"
listening nvmet_rdma 198.51.100.1 4421 rxe0 || fail "198.51.100.1:4421 (on the macvlan mv0) does not listen on rxe0"
listening nvmet_rdma 2001:db8::1 4423 rxe0 || fail "[2001:db8::1]:4423 does not listen on rxe0"
run rdma resource show cm_id
detail="VLAN, macvlan and IPv6 addresses bind to rxe0 through its GID table"
if [ $SIW = 1 ]; then
	must nvmet_port 4 203.0.113.1 4422
	must nvmet_link 4 $NQN
	listening nvmet_rdma 203.0.113.1 4422 siw0 || fail "203.0.113.1:4422 does not listen on siw0"
	must nvmet_port 5 203.0.113.2 4424
	must nvmet_link 5 $NQN
	listening nvmet_rdma 203.0.113.2 4424 siw0 || fail "203.0.113.2:4424 (on the VLAN veth2.200) does not listen on siw0"
	must nvmet_port 6 203.0.113.3 4425
	if run nvmet_link 6 $NQN; then
		fail "203.0.113.3:4425 (on the macvlan mv2 of siw0's veth2) was bound: $(rdma resource show cm_id | grep 203.0.113.3)"
	fi
	info "nvmet port on the macvlan of siw0's netdev refused: $(cat "$W/run.out")"
	detail="$detail; 203.0.113.1 and 203.0.113.2 (VLAN) bind to siw0, 203.0.113.3 (macvlan) to nothing"
fi
pass "$detail"
