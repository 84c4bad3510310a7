#!/bin/sh
# Builds the managed plugin without `docker build` and creates it on the
# engine DOCKER_HOST points at (the docker CLI's usual default otherwise).
#
#   plugin/build.sh BIN NAME      (make plugin [PLUGIN=name:tag])
#
# BIN is a static underlay binary (CGO_ENABLED=0, as `make build` makes it).
# The plugin directory is OUT (default plugin/build): OUT/config.json, the
# repository's config.json, and OUT/rootfs/underlay, the only file of the
# rootfs. A plugin NAME that already exists is left alone and the script
# fails, unless FORCE=1, which removes it first (docker plugin rm -f).
# CONFIG is the plugin's config.json (default: the repository's; the repair
# plugin's is plugin/config-repair.json, make plugin-repair).
# DOCKER names the docker CLI to use (default: docker on PATH). CREATE=0 only
# writes OUT (no engine needed; NAME is not used): make release does that for
# each architecture's dist/plugin-linux-ARCH. BIN may be of another
# architecture than the machine's (GOARCH=arm64): `docker plugin create`
# does not look at the binary.
set -eu

usage() { echo "usage: [FORCE=1] [OUT=DIR] $0 BIN NAME" >&2; exit 2; }
[ $# -eq 2 ] || usage
bin=$1
name=$2
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/build}
docker=${DOCKER:-docker}

[ -f "$bin" ] && [ -x "$bin" ] || { echo "$0: $bin is not an executable file: run make build first" >&2; exit 1; }
# The rootfs holds nothing but the binary: no libc, no loader.
if command -v ldd >/dev/null 2>&1 && ldd "$bin" >/dev/null 2>&1; then
	echo "$0: $bin is dynamically linked; the plugin rootfs has no libc: build it with CGO_ENABLED=0" >&2
	exit 1
fi

config=${CONFIG:-$here/../config.json}
[ -f "$config" ] || { echo "$0: CONFIG=$config is not a file" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/rootfs/var/lib/underlay" "$out/rootfs/host/run"
cp "$config" "$out/config.json"
cp "$bin" "$out/rootfs/underlay"
chmod 0755 "$out/rootfs/underlay"
if [ "${CREATE:-1}" = 0 ]; then
	echo "$0: wrote the plugin directory $out (CREATE=0: not created on an engine)" >&2
	exit 0
fi

if "$docker" plugin inspect --format '{{.Name}}' "$name" >/dev/null 2>&1; then
	if [ "${FORCE:-}" != 1 ]; then
		echo "$0: plugin $name already exists on this engine: docker plugin rm it, or run with FORCE=1 to replace it" >&2
		exit 1
	fi
	echo "$0: FORCE=1: removing the existing plugin $name" >&2
	"$docker" plugin rm --force "$name" >&2
fi
"$docker" plugin create "$name" "$out"
echo "$0: created plugin $name (disabled): docker plugin enable $name" >&2
