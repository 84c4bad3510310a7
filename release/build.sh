#!/bin/bash
# release/build.sh DIST VERSION      (make release [DIST=dist] [VERSION=...])
#
# Writes the release artifacts of VERSION (git describe --always --dirty) into DIST, which it
# empties first:
#
#   underlay-linux-amd64, underlay-linux-arm64   static binaries (CGO_ENABLED=0, -trimpath,
#                                                -buildvcs=false, -buildid=, -s -w, version stamped
#                                                with -X main.version=VERSION)
#   underlay-linux-ARCH.spdx.json                SPDX 2.3 SBOM of the Go modules in each binary
#                                                (release/sbom: the build information go version -m
#                                                reads)
#   plugin-linux-amd64/, plugin-linux-arm64/     managed plugin directories, what `docker plugin
#                                                create NAME DIR` takes: config.json and rootfs/
#                                                (plugin/build.sh with CREATE=0)
#   plugin-repair-linux-amd64/, -arm64/          the repair plugin's (plugin/config-repair.json)
#   underlay_VERSION_amd64.deb, ..._arm64.deb    Debian packages (nfpm, release/nfpm.yaml): the
#                                                binary as /usr/bin/underlay and the systemd unit
#                                                plugin/underlay.service with that path; the manual
#                                                pages man/*.8 (dated, gzip -9n), the bash
#                                                completion completion/underlay.bash, the DEP-5
#                                                copyright release/deb/copyright, a Debian
#                                                changelog.gz of the version and lintian's
#                                                overrides release/deb/lintian-overrides; package
#                                                version from release/debversion.sh
#   underlay-dashboard.json, underlay-alerts.yml the Grafana dashboard and the Prometheus alert
#                                                rules, copied from docs/observability/
#   SHA256SUMS                                   sha256sum of every file above (plugin files by path)
#
# Reproducible: the same commit gives the same bytes, whatever the build cache, the checkout's
# path or the time; every timestamp inside the packages is the commit's time (SOURCE_DATE_EPOCH,
# unless set). Env: GO (go), NFPM (an nfpm binary: make release builds the pinned one);
# ARCHES (default "amd64 arm64"); BINARIES_ONLY=1 writes only the binaries (make test-vm-arm64
# tests the release binary built this way; no nfpm, no SHA256SUMS).
set -euo pipefail

die() { echo "release/build.sh: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 DIST VERSION"
dist=$1 version=$2
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
GO=${GO:-go}
NFPM=${NFPM:-}
only=${BINARIES_ONLY:-0}
[ "$only" = 1 ] || { [ -n "$NFPM" ] && [ -x "$NFPM" ]; } ||
	die "NFPM=$NFPM is not an executable nfpm: run it through make release, which builds the pinned nfpm"
[[ $version =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$ ]] ||
	die "VERSION=$version: want letters, digits, '.', '_', '-' (it names files and plugin tags)"
debversion=$("$here/debversion.sh" "$version") || die "VERSION=$version has no Debian version: release from a git checkout, or set VERSION=vX.Y.Z"
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$top" log -1 --format=%ct 2>/dev/null) ||
		die "cannot read the commit's time (git log): set SOURCE_DATE_EPOCH"
fi
export SOURCE_DATE_EPOCH
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
arches=${ARCHES:-amd64 arm64}

mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
case $dist in "$top" | / | "$HOME") die "DIST=$dist would empty $dist" ;; esac
if [ -n "$(ls -A "$dist")" ] && ! compgen -G "$dist/underlay-linux-*" >/dev/null; then
	die "DIST=$dist is not empty and holds no earlier release (underlay-linux-*): refusing to empty it"
fi
find "$dist" -mindepth 1 -delete
work=$(mktemp -d "${TMPDIR:-/tmp}/underlay-release.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "release/build.sh: VERSION=$version (Debian $debversion), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH ($created), into $dist" >&2
# The architecture-independent files of the .debs. The pages' .TH date is the commit's, their
# source the version; gzip -9n stores no name and no time.
common=$work/common
mkdir -p "$common"
if [ "$only" != 1 ]; then
	day=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
	for page in "$top"/man/*.8; do
		head -n 5 "$page" | grep -q '^\.TH [A-Z\\-]* 8 "" "underlay" ' || die "$page has no generated .TH line: go test ./cmd/underlay -run TestManPages -update-man"
		sed "s/^\(\.TH [^ ]* 8\) \"\" \"underlay\" /\1 \"$day\" \"underlay $version\" /" "$page" | gzip -9n >"$common/$(basename "$page").gz"
	done
	cp "$top/completion/underlay.bash" "$here/deb/copyright" "$common/"
	cp "$here/deb/lintian-overrides" "$common/lintian-overrides"
	{
		echo "underlay ($debversion) unstable; urgency=medium"
		echo
		echo "  * Release $version of underlay. Its changes are in the history of"
		echo "    https://github.com/underlay-net/underlay."
		echo
		echo " -- underlay maintainers <maintainers@underlay.dev>  $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
	} | gzip -9n >"$common/changelog.gz"
	for f in underlay-dashboard.json underlay-alerts.yml; do
		[ -f "$top/docs/observability/$f" ] || die "docs/observability/$f is missing: the release ships it"
		cp "$top/docs/observability/$f" "$dist/$f"
	done
fi

for arch in $arches; do
	bin=$dist/underlay-linux-$arch
	(cd "$top" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -buildvcs=false \
		-ldflags "-s -w -buildid= -X main.version=$version" -o "$bin" ./cmd/underlay) ||
		die "go build for linux/$arch failed"
	[ "$only" != 1 ] || continue
	(cd "$top" && "$GO" run ./release/sbom -name "underlay-linux-$arch" -version "$version" -created "$created" "$bin") \
		>"$dist/underlay-linux-$arch.spdx.json" || die "SBOM of $bin failed"

	CREATE=0 OUT="$dist/plugin-linux-$arch" "$top/plugin/build.sh" "$bin" "underlay:$version-$arch" ||
		die "plugin directory for $arch failed"
	CONFIG="$top/plugin/config-repair.json" CREATE=0 OUT="$dist/plugin-repair-linux-$arch" "$top/plugin/build.sh" "$bin" "underlay:$version-repair-$arch" ||
		die "repair plugin directory for $arch failed"

	# The packaged unit: plugin/underlay.service (docs/install.md), its header (manual install steps)
	# replaced, the binary at Debian's path.
	unit=$work/$arch/underlay.service
	mkdir -p "$work/$arch"
	{
		echo "# underlay as a host daemon (legacy plugin mode), installed by the underlay Debian package."
		echo "# Docker finds the socket in /run/docker/plugins and the driver is used as \`-d underlay\`."
		echo "# Set LOG_LEVEL, SCOPE or DOCKER_HOST with \`systemctl edit underlay\`. State: /var/lib/underlay."
		awk 'body || !/^#/ {body = 1; gsub("/usr/local/bin/underlay", "/usr/bin/underlay"); print}' "$top/plugin/underlay.service"
	} >"$unit"
	grep -q '^ExecStart=/usr/bin/underlay serve' "$unit" || die "packaged unit has no ExecStart=/usr/bin/underlay: plugin/underlay.service changed?"
	deb=$dist/underlay_${version}_$arch.deb
	(cd "$top" && DEB_ARCH=$arch DEB_VERSION=$debversion DEB_BINARY=$bin DEB_UNIT=$unit DEB_COMMON=$common \
		"$NFPM" package --config release/nfpm.yaml --packager deb --target "$deb" >&2) || die "nfpm for $arch failed"
done

[ "$only" != 1 ] || { echo "release/build.sh: BINARIES_ONLY=1: wrote $(cd "$dist" && echo underlay-linux-*) in $dist" >&2; exit 0; }
(cd "$dist" && find . -type f ! -name SHA256SUMS | sed 's#^\./##' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "release/build.sh: wrote $dist:" >&2
(cd "$dist" && cat SHA256SUMS) >&2
