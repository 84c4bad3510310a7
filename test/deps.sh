#!/bin/sh
# Installs the Debian packages the test suites need, when run as root:
# docker.io (engine 20.10) and busybox-static for the Docker end-to-end
# suite, docker-registry for `docker plugin install`, qemu-system-x86 for
# the VM suite (test/vm/run.sh fetches the VM kernel itself), qemu-system-arm
# for the arm64 VM suite (make test-vm-arm64), systemd's systemd-analyze for
# make test-release's check of the packaged unit, lintian for its check of
# the .debs, libseccomp-dev, pkg-config
# and gcc for the current engine's runc (make engine-current builds it with
# seccomp, cgo).
set -eu
missing=
need() { command -v "$1" >/dev/null 2>&1 || missing="$missing $2"; }
need dockerd docker.io
need busybox busybox-static
need docker-registry docker-registry
need qemu-system-x86_64 qemu-system-x86
need qemu-system-aarch64 qemu-system-arm
need systemd-analyze systemd
need lintian lintian
need dnsmasq dnsmasq-base
[ -e /usr/include/seccomp.h ] || missing="$missing libseccomp-dev"
need pkg-config pkg-config
need gcc gcc
[ -n "$missing" ] || exit 0
if [ "$(id -u)" != 0 ]; then
	echo "test/deps.sh: missing$missing; run as root to install them (the suites that need them will say so)" >&2
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
echo "test/deps.sh: installing$missing" >&2
apt-get install -y -q --no-install-recommends $missing >&2 ||
	{ apt-get update -q >&2 && apt-get install -y -q --no-install-recommends $missing >&2; }
