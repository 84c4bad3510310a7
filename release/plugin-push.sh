#!/bin/bash
# release/plugin-push.sh DIST REGISTRY VERSION      (make plugin-push REGISTRY=host:port)
#
# Pushes the managed plugin directories of a release (DIST/plugin-linux-ARCH, from make release)
# through the engine DOCKER_HOST points at:
#
#   REGISTRY/underlay:VERSION-amd64    from plugin-linux-amd64
#   REGISTRY/underlay:VERSION-arm64    from plugin-linux-arm64
#   REGISTRY/underlay:latest           from this machine's architecture's directory
#   REGISTRY/underlay:VERSION-repair-amd64, -repair-arm64, :repair   the repair plugin's
#                                      (plugin-repair-linux-ARCH: the container-side repair,
#                                      CAP_SYS_ADMIN), likewise
#
# One tag per architecture: a managed plugin cannot be pulled from a multi-architecture manifest
# (docker plugin install takes a plugin manifest, not an index), so users pick their
# architecture's tag. Each name is created on the engine (docker plugin create), pushed, and
# removed from the engine again. A plugin of that name already on the engine is refused, unless
# FORCE=1 (docker plugin rm -f first). DOCKER names the docker CLI (default docker).
set -euo pipefail

die() { echo "release/plugin-push.sh: $*" >&2; exit 1; }
[ $# -eq 3 ] || die "usage: $0 DIST REGISTRY VERSION"
dist=$1 registry=${2%/} version=$3
docker=${DOCKER:-docker}
[[ $registry =~ ^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._/-]+)?$ ]] || die "REGISTRY=$registry: want host:port (optionally /path)"
case $(uname -m) in
	x86_64) own=amd64 ;;
	aarch64 | arm64) own=arm64 ;;
	*) die "this machine is $(uname -m): no release architecture is its own (amd64, arm64)" ;;
esac
for arch in amd64 arm64; do
	for p in plugin plugin-repair; do
		[ -f "$dist/$p-linux-$arch/config.json" ] && [ -x "$dist/$p-linux-$arch/rootfs/underlay" ] ||
			die "$dist/$p-linux-$arch is not a plugin directory: run make release first"
	done
done

push() { # push NAME DIR
	local name=$1 dir=$2
	if "$docker" plugin inspect --format '{{.Name}}' "$name" >/dev/null 2>&1; then
		[ "${FORCE:-}" = 1 ] || die "plugin $name already exists on this engine: docker plugin rm it, or run with FORCE=1"
		"$docker" plugin rm --force "$name" >&2
	fi
	"$docker" plugin create "$name" "$dir" >&2 || die "docker plugin create $name $dir failed"
	if ! "$docker" plugin push "$name" >&2; then
		"$docker" plugin rm --force "$name" >/dev/null 2>&1 || true
		die "docker plugin push $name failed (can the engine reach $registry? a registry without TLS must be 127.0.0.0/8 or in the engine's insecure-registries)"
	fi
	"$docker" plugin rm --force "$name" >/dev/null
	echo "release/plugin-push.sh: pushed $name" >&2
}
push "$registry/underlay:$version-amd64" "$dist/plugin-linux-amd64"
push "$registry/underlay:$version-arm64" "$dist/plugin-linux-arm64"
push "$registry/underlay:latest" "$dist/plugin-linux-$own"
push "$registry/underlay:$version-repair-amd64" "$dist/plugin-repair-linux-amd64"
push "$registry/underlay:$version-repair-arm64" "$dist/plugin-repair-linux-arm64"
push "$registry/underlay:repair" "$dist/plugin-repair-linux-$own"
