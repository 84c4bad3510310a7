#!/bin/sh
# Builds the current Docker engine of engines/current.env into DIR:
# DIR/dockerd (moby's cmd/dockerd, CGO off, reporting its tag as its
# version) and DIR/runc (with seccomp, CGO on: needs libseccomp-dev,
# installed with apt-get when run as root). Debian's containerd 1.6.20
# (docker.io) runs them. A DIR that already holds both, of these versions,
# is reused as it is; a build goes to DIR.tmp.* and is renamed into place
# only when both binaries are built and answer --version, so an
# interrupted build leaves nothing half done behind; two builds of one DIR at once take turns
# (DIR.lock).
#
#   engines/build.sh DIR      (make engine-current gives the cache dir)
set -eu
cd "$(dirname "$0")/.."
. engines/current.env
[ $# = 1 ] || { echo "usage: engines/build.sh DIR" >&2; exit 2; }
dir=$1
GO=${GO:-go}

cached() {
	[ -x "$1/dockerd" ] && [ -x "$1/runc" ] &&
		"$1/dockerd" --version 2>/dev/null | grep -q "version $MOBY_VERSION," &&
		"$1/runc" --version 2>/dev/null | grep -q '^libseccomp:'
}
# One build at a time per DIR: make test's lanes may ask for the engine at once; the second
# waits for the first and then finds it built.
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if cached "$dir"; then
	echo "engine-current: $dir holds dockerd $MOBY_VERSION and runc $RUNC_VERSION (cached)"
	exit 0
fi

# runc's seccomp support links libseccomp through cgo (gcc, pkg-config).
missing=
command -v gcc >/dev/null 2>&1 || missing="$missing gcc"
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
[ -e /usr/include/seccomp.h ] || missing="$missing libseccomp-dev"
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "engine-current: runc's seccomp build needs$missing: run as root (sudo make engine-current) or apt-get install$missing" >&2
		exit 1
	fi
	echo "engine-current: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q --no-install-recommends $missing >&2 ||
		{ apt-get update -q >&2 && apt-get install -y -q --no-install-recommends $missing >&2; }
fi

tmp=$(mktemp -d "$dir.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "engine-current: building dockerd $MOBY_VERSION and runc $RUNC_VERSION into $dir (a few minutes cold)" >&2
# -trimpath as the Compose build (engines/build-compose.sh) and the release
# build: the three share their compiled standard library (and the modules
# of the same version) in the Go build cache instead of compiling it each;
# -s -w: no symbol table and no DWARF to link (the suites never debug it).
GOBIN=$tmp CGO_ENABLED=0 "$GO" install -trimpath \
	-ldflags "-s -w -X github.com/moby/moby/v2/dockerversion.Version=$MOBY_VERSION" \
	"github.com/moby/moby/v2/cmd/dockerd@$MOBY_VERSION"
GOBIN=$tmp CGO_ENABLED=1 "$GO" install -tags seccomp "github.com/opencontainers/runc@$RUNC_VERSION"
if ! cached "$tmp"; then
	echo "engine-current: the build does not answer as expected:" >&2
	"$tmp/dockerd" --version >&2 || true
	"$tmp/runc" --version >&2 || true
	exit 1
fi
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "engine-current: built $dir in $(($(date +%s) - start))s:" >&2
"$dir/dockerd" --version >&2
"$dir/runc" --version >&2
