#!/bin/sh
# Builds the Docker Compose CLI plugin of engines/current.env
# (COMPOSE_VERSION, a tag of github.com/docker/compose/v5) into
# DIR/docker-compose: cmd of the module, CGO off, -trimpath, reporting its
# tag as its version (`docker-compose version`). The e2e suites use it as
# the docker CLI's plugin ($DOCKER_CONFIG/cli-plugins/docker-compose).
#
# `go install github.com/docker/compose/v5/cmd@VERSION` is refused (the
# module's go.mod has an exclude block), so the build runs inside the
# module itself: `go mod download` puts it in the module cache (from the Go
# module proxy) and `go build` runs in that directory, with the module's
# own go.mod and go.sum. Its go.mod names the Go it needs (go 1.26.8 for
# v5.6.0).
#
# As engines/build.sh: a DIR whose docker-compose answers `version` with
# COMPOSE_VERSION is reused as it is; a build goes to DIR.tmp.* and is
# renamed into place only when its binary answers so, so an interrupted
# build leaves nothing half done behind; two builds of one DIR at once take
# turns (DIR.lock).
#
#   engines/build-compose.sh DIR      (make compose gives the cache dir)
#
# Env: GO (the go binary; go from PATH by default).
set -eu
cd "$(dirname "$0")/.."
. engines/current.env
[ $# = 1 ] || { echo "usage: engines/build-compose.sh DIR" >&2; exit 2; }
dir=$1
GO=${GO:-go}
command -v "$GO" >/dev/null 2>&1 || { echo "compose: GO=$GO is not a go binary: set GO (make passes its own), or put go on PATH" >&2; exit 1; }
module=github.com/docker/compose/v5

# The exact line `docker-compose version` prints for the pinned tag.
cached() {
	[ -x "$1/docker-compose" ] &&
		[ "$("$1/docker-compose" version 2>/dev/null)" = "Docker Compose version $COMPOSE_VERSION" ]
}
# One build at a time per DIR: make test's lanes may ask for it at once (test-e2e and
# test-e2e-current need it, the engine lane builds it); the second waits for the first and
# then finds it built.
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if cached "$dir"; then
	echo "compose: $dir holds docker-compose $COMPOSE_VERSION (cached)"
	exit 0
fi

tmp=$(mktemp -d "$dir.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "compose: building docker-compose $COMPOSE_VERSION into $dir (a few minutes cold)" >&2
# Outside any module and workspace (in the empty tmp dir, GOWORK=off): the module's
# directory in the module cache.
if ! json=$(cd "$tmp" && GOWORK=off "$GO" mod download -json "$module@$COMPOSE_VERSION" 2>&1); then
	echo "$json" >&2
	echo "compose: go mod download $module@$COMPOSE_VERSION failed (above): is COMPOSE_VERSION in engines/current.env a tag of $module, and the Go module proxy reachable (GOPROXY=$("$GO" env GOPROXY))?" >&2
	exit 1
fi
src=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [ -z "$src" ] || [ ! -f "$src/go.mod" ]; then
	printf '%s\n' "$json" >&2
	echo "compose: go mod download -json gave no module directory with a go.mod (\"Dir\" above: '$src')" >&2
	exit 1
fi
if ! (cd "$src" && GOWORK=off CGO_ENABLED=0 "$GO" build -trimpath \
	-ldflags "-w -X $module/internal.Version=$COMPOSE_VERSION" -o "$tmp/docker-compose" ./cmd); then
	echo "compose: go build of $module $COMPOSE_VERSION in $src failed (above); its go.mod asks for go $(sed -n 's/^go //p' "$src/go.mod"), this is $("$GO" env GOVERSION) (GOTOOLCHAIN=$("$GO" env GOTOOLCHAIN))" >&2
	exit 1
fi
if ! cached "$tmp"; then
	echo "compose: the build does not answer \`docker-compose version\` with 'Docker Compose version $COMPOSE_VERSION':" >&2
	"$tmp/docker-compose" version >&2 || true
	exit 1
fi
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "compose: built $dir in $(($(date +%s) - start))s:" >&2
"$dir/docker-compose" version >&2
