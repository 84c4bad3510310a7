#!/bin/bash
# release/debversion.sh VERSION
#
# Prints the Debian package version for a release VERSION (git describe --always --dirty), which
# names the files and the plugin tags but is not always a valid Debian version (it must start with
# a digit, and a hyphen would mean a Debian revision):
#
#   v1.2.3                      1.2.3                  a tagged release
#   v1.2.0-rc1                  1.2.0~rc1              a hyphen in a tag becomes ~ (sorts before 1.2.0)
#   v1.2.3-4-gabc1234           1.2.3+4.gabc1234       4 commits after v1.2.3 (after 1.2.3, before 1.2.4)
#   abc1234                     0.0.0+gabc1234         no tag yet: 0.0.0, the commit
#   ...-dirty                   ...+dirty / ....dirty  uncommitted changes (+dirty, or .dirty after a +)
#
# Tags are vX.Y.Z (or X.Y.Z). Untagged builds of different commits do not order among themselves:
# tag a release for apt to upgrade in order. Exits 1 with a message when VERSION cannot be mapped.
set -euo pipefail

die() { echo "release/debversion.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] && [ -n "$1" ] || die "usage: $0 VERSION (git describe --always --dirty)"
d=$1 dirty= tag= n= hash=
if [[ $d == *-dirty ]]; then dirty=1; d=${d%-dirty}; fi
if [[ $d =~ ^(.+)-([0-9]+)-g([0-9a-f]{4,40})$ ]]; then
	tag=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]} hash=${BASH_REMATCH[3]}
elif [[ $d =~ ^[0-9a-f]{4,40}$ ]]; then
	hash=$d
else
	tag=$d
fi
if [ -n "$tag" ]; then
	v=${tag#v}
	v=${v//-/\~}
	[[ $v =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "$1: the tag $tag is not a version (vX.Y.Z): cannot make a Debian version of it"
else
	v=0.0.0
fi
if [ -n "$hash" ]; then
	if [ -n "$n" ]; then v+="+$n.g$hash"; else v+="+g$hash"; fi
fi
if [ -n "$dirty" ]; then
	if [[ $v == *+* ]]; then v+=.dirty; else v+=+dirty; fi
fi
if command -v dpkg >/dev/null 2>&1; then
	dpkg --validate-version "$v" 2>/dev/null || die "$1: mapped to $v, which dpkg refuses"
fi
echo "$v"
