#!/bin/sh
# sysfs-gid-build.sh LINES DIR: (re)builds the sysfs fixture tree DIR from
# LINES, the "E2E INFO" lines (prefix removed) that the e2e scenario
# tests/guest/scenarios/16-gid-table.sh printed on a real kernel:
#   device <dev> node_guid <g> node_type <n:_T> link_layer <l> ports <p>…
#   netdev <name> ifindex <i> address <mac>
#   gid <dev> <port> <index> <gid> <ndev|-> <type|->   (spaces in types as _)
#   gidread <dev> <port> <index> <attr> rc=<rc> <output>
# The layout is sysfs's: class/* entries are relative symlinks into
# devices/virtual. Entries whose ndevs/types read failed with EINVAL on the
# kernel have no file here (absent reads as "none" too); of the empty
# entries only those named by a gidread line are written.
set -eu
lines=$1
out=$2
case ${out##*/} in sysfs-gid-*) ;; *) echo "$0: $out: not a sysfs-gid-* folder" >&2 && exit 2 ;; esac
rm -rf "$out"
mkdir -p "$out/class/infiniband" "$out/class/net"
ib=$out/devices/virtual/infiniband
while read -r kind a b c d e f rest; do
	case $kind in
	device)
		# rest = "<link_layer> ports <p>…"
		set -- $rest
		ll=$1
		shift 2
		mkdir -p "$ib/$a"
		echo "$c" >"$ib/$a/node_guid"
		echo "$e" | tr _ ' ' >"$ib/$a/node_type"
		ln -s "../../devices/virtual/infiniband/$a" "$out/class/infiniband/$a"
		for p in "$@"; do
			mkdir -p "$ib/$a/ports/$p"
			echo "$ll" >"$ib/$a/ports/$p/link_layer"
		done
		;;
	netdev)
		mkdir -p "$out/devices/virtual/net/$a"
		echo "$c" >"$out/devices/virtual/net/$a/ifindex"
		echo "$e" >"$out/devices/virtual/net/$a/address"
		ln -s "../../devices/virtual/net/$a" "$out/class/net/$a"
		;;
	gid)
		# not "gid fill …" / "gid removal …" (timings)
		case $b$c in '' | *[!0-9]*) continue ;; esac
		[ -z "$rest" ] || continue
		p=$ib/$a/ports/$b
		mkdir -p "$p/gids"
		echo "$d" >"$p/gids/$c"
		if [ "$e" != - ]; then
			mkdir -p "$p/gid_attrs/ndevs"
			echo "$e" >"$p/gid_attrs/ndevs/$c"
		fi
		if [ "$f" != - ]; then
			mkdir -p "$p/gid_attrs/types"
			echo "$f" | tr _ ' ' >"$p/gid_attrs/types/$c"
		fi
		;;
	gidread)
		case $b$c in '' | *[!0-9]*) continue ;; esac
		p=$ib/$a/ports/$b
		if [ "$d" = gids ] && [ "$e" = rc=0 ] && [ ! -e "$p/gids/$c" ]; then
			echo "$f" >"$p/gids/$c"
		fi
		;;
	esac
done <"$lines"
