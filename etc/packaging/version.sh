#!/bin/sh
# The package version, from `git describe` (make packages; README.md here).
#
#   version.sh [--rpm]                    this checkout, or $PKG_VERSION
#   version.sh [--rpm] DESCRIBE [COUNT]   a given `git describe --tags
#                                         --always --dirty --abbrev=7`
#                                         output and commit count (tests)
#
# A tag vX.Y.Z gives X.Y.Z; N commits past it, X.Y.Z+N.gHASH (sorts after
# X.Y.Z and before the next tag); no tag at all, 0.0.0+COUNT.gHASH with COUNT
# the number of commits, so a later commit is a newer package. A dirty tree
# adds .dirty (X.Y.Z+0.dirty on a tag: after the tag, before the next
# commit). A '-' inside a tag (v1.0-rc1) becomes '~' (sorts before v1.0).
# Neither dpkg nor rpm allows '-' in a version.
#
# That is the .deb's version (a native package: no revision). rpm would sort
# X.Y+N after X.Y.1 ('+' is a mere separator to it), so --rpm prints
# "VERSION RELEASE" with what follows the '+' moved to the release:
# 1.2.3+4.gHASH is version 1.2.3, release 1.4.gHASH (Fedora's snapshot
# style, understood by every rpm); a plain X.Y.Z is release 1.
set -eu
rpm=
if [ "${1-}" = --rpm ]; then
	rpm=1
	shift
fi

fail() {
	echo "version.sh: cannot make a version from \"$1\"" >&2
	exit 1
}

if [ $# -eq 0 ] && [ -n "${PKG_VERSION-}" ]; then
	v=$PKG_VERSION
else
	if [ $# -ge 1 ]; then
		describe=$1
		count=${2:-0}
	else
		describe=$(git describe --tags --always --dirty --abbrev=7 --match 'v[0-9]*' 2>/dev/null) || {
			echo "version.sh: not a git checkout; set PKG_VERSION" >&2
			exit 1
		}
		count=$(git rev-list --count HEAD)
	fi
	orig=$describe
	dirty=
	case $describe in
	*-dirty)
		dirty=.dirty
		describe=${describe%-dirty}
		;;
	esac
	# vX.Y.Z-N-gHASH, vX.Y.Z, or a bare HASH.
	since=$(printf '%s\n' "$describe" | sed -n 's/^v\(.*\)-\([0-9][0-9]*\)-g\([0-9a-f][0-9a-f]*\)$/\2.g\3/p')
	tag=$(printf '%s\n' "$describe" | sed -n 's/^v\(.*\)-[0-9][0-9]*-g[0-9a-f][0-9a-f]*$/\1/p')
	if [ -z "$tag" ]; then
		case $describe in
		v[0-9]*) tag=${describe#v} ;;
		*)
			printf '%s\n' "$describe" | grep -Eqx '[0-9a-f]{4,40}' || fail "$orig"
			tag=0.0.0
			since=$count.g$describe
			;;
		esac
	fi
	tag=$(printf '%s\n' "$tag" | tr -- - '~')
	if [ -n "$dirty" ] && [ -z "$since" ]; then
		since=0
	fi
	v=$tag${since:++$since}$dirty
fi
printf '%s\n' "$v" | grep -Eqx '[0-9][0-9A-Za-z.~]*(\+[0-9A-Za-z.~]+)?' || fail "$v"
if [ -n "$rpm" ]; then
	case $v in
	*+*) printf '%s 1.%s\n' "${v%%+*}" "${v#*+}" ;;
	*) printf '%s 1\n' "$v" ;;
	esac
else
	printf '%s\n' "$v"
fi
