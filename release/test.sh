#!/bin/bash
# release/test.sh VERSION      (make test-release; root: dpkg --root, a dockerd of its own)
#
# Proves the release of this checkout:
#   1. reproducible: release/build.sh twice, into two directories, the second from another
#      checkout path with an empty Go build cache, another TMPDIR, time zone, locale and umask,
#      for this machine's architecture: its files are the first's, byte for byte (each SHA256SUMS
#      verifies);
#   2. the artifacts: exactly the expected files; the binaries static, of their architecture,
#      stamped with VERSION, without a build ID, built with -trimpath and CGO_ENABLED=0; the SBOMs
#      name every module `go version -m` lists; the plugin directories (and the repair plugin's)
#      hold their config.json and rootfs/underlay and nothing else; the Debian version mapping (release/debversion.sh);
#      the observability files (underlay-dashboard.json, underlay-alerts.yml) equal to
#      docs/observability/'s;
#   3. the .debs (dpkg-deb): control fields, the exact file list with modes, the maintainer
#      scripts, the binary inside identical to the release's, the unit's ExecStart, the manual
#      pages (man/, dated, gzip -9n), the bash completion, the copyright file, the changelog and
#      lintian's overrides; lintian on both .debs: no error and no warning it does not override;
#   4. the .deb of this machine's architecture installed into a scratch root (dpkg --root
#      --force-script-chrootless: the maintainer scripts run with DPKG_ROOT), installed again (an
#      upgrade), the unit enabled there (systemctl --root) and verified by
#      `systemd-analyze verify --root`, then purged: nothing of it left; the other architecture's
#      .deb unpacked into a second root (dpkg --force-architecture);
#   5. the plugin directory of this machine's architecture created and enabled on a dockerd of
#      the test's own (in a network namespace of its own, with Debian's docker-registry beside
#      it), a network created with it; release/plugin-push.sh pushes the six tags, and the
#      architecture's tag installs from the registry and serves a network.
# Env: GO, NFPM (as release/build.sh). Needs dpkg, systemd-analyze, lintian (which brings dpkg-dev,
# man-db and groff-base), dockerd, docker,
# docker-registry and busybox (test/deps.sh installs them); a missing one fails the test.
set -euo pipefail

die() { echo "release/test.sh: FAIL: $*" >&2; exit 1; }
say() { echo "release/test.sh: $*" >&2; }
[ $# -eq 1 ] || die "usage: $0 VERSION"
version=$1
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
GO=${GO:-go}
[ "$(id -u)" = 0 ] || die "needs root (dpkg --root, dockerd)"
for t in dpkg dpkg-deb dpkg-parsechangelog systemd-analyze systemctl lintian groff man dockerd docker docker-registry busybox nsenter ip sha256sum; do
	command -v "$t" >/dev/null || die "$t not found: run test/deps.sh (as root) first"
done
case $(uname -m) in x86_64) own=amd64 other=arm64 ;; aarch64) own=arm64 other=amd64 ;; *) die "unsupported machine $(uname -m)" ;; esac
debversion=$(release/debversion.sh "$version")

T=$(mktemp -d /tmp/underlay-release-test.XXXXXX)
cleanups=()
cleanup() {
	local i
	for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
	# Only after every mount below it is gone (a plugin's bind of /run, for one).
	if ! grep -q " $T/" /proc/self/mountinfo; then rm -rf --one-file-system "$T"; else echo "release/test.sh: left $T (mounts below it)" >&2; fi
}
trap cleanup EXIT

# ---- 0. the Debian version mapping ----
while read -r in want; do
	got=$(release/debversion.sh "$in") || die "debversion.sh $in failed"
	[ "$got" = "$want" ] || die "debversion.sh $in = $got, want $want"
done <<'EOF'
v1.2.3 1.2.3
1.2.3 1.2.3
v1.2.0-rc1 1.2.0~rc1
v1.2.3-4-gabc1234 1.2.3+4.gabc1234
v1.2.3-4-gabc1234-dirty 1.2.3+4.gabc1234.dirty
abc1234 0.0.0+gabc1234
abc1234-dirty 0.0.0+gabc1234.dirty
v1.2.3-dirty 1.2.3+dirty
EOF
! release/debversion.sh dev 2>/dev/null || die "debversion.sh accepted the tag 'dev'"
say "ok: Debian versions of git describe (VERSION=$version is $debversion)"

# ---- 1. reproducible ----
# The second build differs from the first in everything the first could have leaked: another
# checkout path (a copy of the tracked files and .git), an empty Go build cache, another TMPDIR,
# time zone, locale and umask. It builds this machine's architecture only (the other one's compile
# from an empty cache took about 200 s of the suite's CPU and is the same compiler over the same
# sources); its files must be byte for byte the first build's.
t0=$(date +%s)
release/build.sh "$T/a" "$version" 2>"$T/build-a.log" || { tail -n 30 "$T/build-a.log" >&2; die "make release (first) failed"; }
t1=$(date +%s)
mkdir -p "$T/gocache" "$T/tmp" "$T/src"
# The files the first build could read: tracked and untracked, what .gitignore leaves out left out.
git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - .git 2>/dev/null |
	tar -xf - -C "$T/src" || die "cannot copy the checkout to $T/src"
gobin=$(command -v "$GO") || die "GO=$GO is not a command"
(cd "$T/src" && umask 0077 && GO=$gobin GOCACHE=$T/gocache TMPDIR=$T/tmp TZ=Pacific/Chatham LC_ALL=C.UTF-8 ARCHES=$own \
	release/build.sh "$T/b" "$version") 2>"$T/build-b.log" ||
	{ tail -n 30 "$T/build-b.log" >&2; die "make release (second: other checkout, empty build cache, ARCHES=$own) failed"; }
t2=$(date +%s)
rm -rf "$T/gocache" "$T/src"
say "release built in $((t1 - t0)) s (${ARCHES:-amd64 arm64}), $((t2 - t1)) s ($own only, another checkout, empty build cache)"
(cd "$T/a" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not verify in the first build"
(cd "$T/b" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not verify in the second build"
# Every file of the second build is the first's, and the second holds every file of the first
# but the other architecture's.
if extra=$(grep -vxF -f "$T/a/SHA256SUMS" "$T/b/SHA256SUMS"); then
	die "the second build's files differ from the first's:"$'\n'"$extra"$'\n'"(first build:)"$'\n'"$(cat "$T/a/SHA256SUMS")"
fi
missing=$(grep -v -e "-$other\(\.spdx\.json\)\?\$" -e "_$other\.deb\$" -e "-$other/" "$T/a/SHA256SUMS" | grep -vxF -f "$T/b/SHA256SUMS" || true)
[ -z "$missing" ] || die "the second build lacks files of the first:"$'\n'"$missing"
[ "$(cd "$T/b" && find . -type f ! -name SHA256SUMS | wc -l)" = "$(wc -l <"$T/b/SHA256SUMS")" ] ||
	die "the second build holds files SHA256SUMS does not list"
say "ok: two builds, the second's $(wc -l <"$T/b/SHA256SUMS") files identical to the first's ($(wc -l <"$T/a/SHA256SUMS") files):"
sed 's/^/    /' "$T/a/SHA256SUMS" >&2
D=$T/a

# ---- 2. the artifacts ----
want=$(printf '%s\n' SHA256SUMS underlay-linux-amd64 underlay-linux-arm64 underlay-linux-amd64.spdx.json \
	underlay-linux-arm64.spdx.json "underlay_${version}_amd64.deb" "underlay_${version}_arm64.deb" \
	plugin-linux-amd64/config.json plugin-linux-amd64/rootfs/underlay \
	plugin-linux-arm64/config.json plugin-linux-arm64/rootfs/underlay \
	plugin-repair-linux-amd64/config.json plugin-repair-linux-amd64/rootfs/underlay \
	plugin-repair-linux-arm64/config.json plugin-repair-linux-arm64/rootfs/underlay \
	underlay-dashboard.json underlay-alerts.yml | LC_ALL=C sort)
got=$(cd "$D" && find . -type f | sed 's#^\./##' | LC_ALL=C sort)
[ "$got" = "$want" ] || die "dist holds"$'\n'"$got"$'\n'"want"$'\n'"$want"
for f in underlay-dashboard.json underlay-alerts.yml; do
	cmp -s "$D/$f" "docs/observability/$f" || die "dist/$f is not docs/observability/$f"
done
say "ok: dist holds exactly the expected files; the dashboard and the alert rules are docs/observability/'s"
for arch in amd64 arm64; do
	bin=$D/underlay-linux-$arch
	case $arch in amd64) machine="3e 00" ;; arm64) machine="b7 00" ;; esac
	[ "$(od -An -tx1 -j18 -N2 "$bin" | tr -s ' ' | sed 's/^ //;s/ $//')" = "$machine" ] || die "$bin is not an ELF for $arch"
	! grep -qa -e 'ld-linux' -e '/lib64/ld' "$bin" || die "$bin names an ELF interpreter: not static"
	m=$("$GO" version -m "$bin") || die "go version -m $bin"
	# -trimpath keeps -ldflags out of the build information: the stamp is checked in the bytes
	# (and by running this machine's binary below), the build ID with go tool buildid.
	for s in "build	-trimpath=true" "build	CGO_ENABLED=0" "build	GOARCH=$arch" "build	GOOS=linux"; do
		grep -qF -- "$s" <<<"$m" || die "$bin: go version -m has no '$s':"$'\n'"$m"
	done
	id=$("$GO" tool buildid "$bin") || die "go tool buildid $bin"
	grep -qaF "$version" "$bin" || die "$bin does not hold its version $version"
	[ -z "$id" ] || die "$bin has the build ID '$id'"
	sbom=$bin.spdx.json
	grep -q '"spdxVersion": "SPDX-2.3"' "$sbom" || die "$sbom is not SPDX 2.3"
	grep -qF "\"checksumValue\": \"$(sha256sum <"$bin" | cut -d' ' -f1)\"" "$sbom" || die "$sbom does not hold $bin's SHA-256"
	n=0
	while IFS=$'\t' read -r kind path ver _; do  # IFS tab: the leading tab is stripped
		[ "$kind" = dep ] || continue
		grep -qF "\"referenceLocator\": \"pkg:golang/$path@$ver\"" "$sbom" || die "$sbom lacks the module $path $ver"
		n=$((n + 1))
	done <<<"$m"
	[ "$n" -gt 5 ] || die "go version -m $bin lists only $n modules"
	grep -qF "\"referenceLocator\": \"pkg:golang/stdlib@$("$GO" env GOVERSION)\"" "$sbom" || die "$sbom lacks the standard library"
	p=$D/plugin-linux-$arch
	cmp -s "$p/config.json" config.json || die "$p/config.json is not the repository's config.json"
	cmp -s "$p/rootfs/underlay" "$bin" || die "$p/rootfs/underlay is not $bin"
	[ "$(cd "$p" && find . | LC_ALL=C sort | tr '\n' ' ')" = ". ./config.json ./rootfs ./rootfs/host ./rootfs/host/run ./rootfs/underlay ./rootfs/var ./rootfs/var/lib ./rootfs/var/lib/underlay " ] ||
		die "$p holds more or less than config.json, rootfs/underlay and the mount points: $(cd "$p" && find .)"
	p=$D/plugin-repair-linux-$arch
	cmp -s "$p/config.json" plugin/config-repair.json || die "$p/config.json is not the repository's plugin/config-repair.json"
	cmp -s "$p/rootfs/underlay" "$bin" || die "$p/rootfs/underlay is not $bin"
	[ "$(cd "$p" && find . | LC_ALL=C sort | tr '\n' ' ')" = ". ./config.json ./rootfs ./rootfs/host ./rootfs/host/run ./rootfs/underlay ./rootfs/var ./rootfs/var/lib ./rootfs/var/lib/underlay " ] ||
		die "$p holds more or less than config.json, rootfs/underlay and the mount points: $(cd "$p" && find .)"
	say "ok: $arch binary (static, trimpath, no build ID, version $version), its SBOM ($n modules and the stdlib), its plugin directories"
done
out=$("$D/underlay-linux-$own" version 2>&1) || die "underlay-linux-$own version: $out"
grep -qF "$version" <<<"$out" || die "underlay-linux-$own version prints '$out', not $version"
say "ok: underlay-linux-$own version: $out"

# ---- 3. the .debs ----
for arch in amd64 arm64; do
	deb=$D/underlay_${version}_$arch.deb
	for f in "Package: underlay" "Version: $debversion" "Architecture: $arch" "Section: net"; do
		dpkg-deb -f "$deb" | grep -qxF -- "$f" || die "$deb: no '$f' in its control file:"$'\n'"$(dpkg-deb -f "$deb")"
	done
	contents=$(dpkg-deb -c "$deb" | awk '$1 ~ /^-/ {print $1, $2, $6}')
	pages="underlay underlay-doctor underlay-ls underlay-mac underlay-serve"
	wantfiles=$({
		echo "-rwxr-xr-x root/root ./usr/bin/underlay"
		echo "-rw-r--r-- root/root ./lib/systemd/system/underlay.service"
		for p in $pages; do echo "-rw-r--r-- root/root ./usr/share/man/man8/$p.8.gz"; done
		echo "-rw-r--r-- root/root ./usr/share/bash-completion/completions/underlay"
		echo "-rw-r--r-- root/root ./usr/share/doc/underlay/copyright"
		echo "-rw-r--r-- root/root ./usr/share/doc/underlay/changelog.gz"
		echo "-rw-r--r-- root/root ./usr/share/lintian/overrides/underlay"
	} | LC_ALL=C sort)
	[ "$(LC_ALL=C sort <<<"$contents")" = "$wantfiles" ] ||
		die "$deb holds other files (or modes) than"$'\n'"$wantfiles"$'\n'"it holds"$'\n'"$contents"
	[ "$(grep -c '^-' <<<"$contents")" = 11 ] || die "$deb does not hold 11 files:"$'\n'"$contents"
	x=$T/deb-$arch
	dpkg-deb -R "$deb" "$x" || die "dpkg-deb -R $deb"
	for s in postinst prerm postrm; do
		cmp -s "$x/DEBIAN/$s" "release/deb/$s" || die "$deb: DEBIAN/$s is not release/deb/$s"
		[ -x "$x/DEBIAN/$s" ] || die "$deb: DEBIAN/$s is not executable"
		sh -n "$x/DEBIAN/$s" || die "$deb: DEBIAN/$s is not valid sh"
	done
	[ "$(cd "$x/DEBIAN" && ls | tr '\n' ' ')" = "control md5sums postinst postrm prerm " ] || die "$deb: control members $(ls "$x/DEBIAN")"
	(cd "$x" && md5sum --quiet -c DEBIAN/md5sums) || die "$deb: md5sums do not match its files"
	cmp -s "$x/usr/bin/underlay" "$D/underlay-linux-$arch" || die "$deb: /usr/bin/underlay is not underlay-linux-$arch"
	grep -qx 'ExecStart=/usr/bin/underlay serve --socket /run/docker/plugins/underlay.sock --state /var/lib/underlay/underlay.db' \
		"$x/lib/systemd/system/underlay.service" || die "$deb: the unit's ExecStart is not /usr/bin/underlay serve ..."
	diff <(grep -v -e '^#' -e '^ExecStart=' "$x/lib/systemd/system/underlay.service") \
		<(grep -v -e '^#' -e '^ExecStart=' plugin/underlay.service) >&2 || die "$deb: the unit differs from plugin/underlay.service beyond ExecStart and comments"
	# gzip -9n: no file name, no time (bytes 3 to 7 zero), maximum compression (XFL 2).
	gz() { [ "$(od -An -tx1 -N9 "$1" | tr -s ' ' | sed 's/^ //;s/ $//')" = "1f 8b 08 00 00 00 00 00 02" ] || die "$deb: $1 is not gzip -9n (header $(od -An -tx1 -N10 "$1"))"; }
	for p in $pages; do
		f=$x/usr/share/man/man8/$p.8.gz
		gz "$f"
		th=$(zcat "$f" | grep -m1 '^\.TH ') || die "$deb: $p.8.gz has no .TH line"
		day=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}" +%Y-%m-%d)
		grep -qF " 8 \"$day\" \"underlay $version\" " <<<"$th" || die "$deb: $p.8.gz's .TH is not dated $day (the commit's) with version $version: $th"
		diff <(zcat "$f" | grep -v '^\.TH ') <(grep -v '^\.TH ' "man/$p.8") >&2 || die "$deb: $p.8.gz is not man/$p.8"
		warn=$(zcat "$f" | LC_ALL=C.UTF-8 MANWIDTH=80 groff -man -Tutf8 -ww -z 2>&1) && [ -z "$warn" ] || die "$deb: groff warns about $p.8: $warn"
	done
	cmp -s "$x/usr/share/bash-completion/completions/underlay" completion/underlay.bash || die "$deb: the bash completion is not completion/underlay.bash"
	cmp -s "$x/usr/share/doc/underlay/copyright" release/deb/copyright || die "$deb: the copyright file is not release/deb/copyright"
	cmp -s "$x/usr/share/lintian/overrides/underlay" release/deb/lintian-overrides || die "$deb: lintian's overrides are not release/deb/lintian-overrides"
	gz "$x/usr/share/doc/underlay/changelog.gz"
	[ "$(zcat "$x/usr/share/doc/underlay/changelog.gz" | head -n 1)" = "underlay ($debversion) unstable; urgency=medium" ] ||
		die "$deb: the changelog does not start with version $debversion: $(zcat "$x/usr/share/doc/underlay/changelog.gz")"
	zcat "$x/usr/share/doc/underlay/changelog.gz" >"$T/changelog"
	[ "$(dpkg-parsechangelog -l "$T/changelog" -S Version)" = "$debversion" ] || die "$deb: dpkg-parsechangelog does not read version $debversion in its changelog"
	# lintian: every error and warning fails, but those release/deb/lintian-overrides overrides
	# with its reason (it can check the other architecture's .deb too).
	if ! out=$(lintian --fail-on error,warning --tag-display-limit 0 "$deb" 2>&1) || grep -q '^[EW]: ' <<<"$out"; then
		echo "$out" >&2
		die "lintian $deb: errors or warnings above (fix them, or override one in release/deb/lintian-overrides saying why)"
	fi
	say "ok: $deb: control, files and modes, maintainer scripts, binary, unit, manual pages, completion, copyright, changelog; lintian clean"
done

# ---- 4. installed into a scratch root ----
root=$T/root
mkdir -p "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/info"
: >"$root/var/lib/dpkg/status"
dpkgr() { dpkg --root="$root" --force-script-chrootless --force-not-root --log=/dev/null "$@"; }
deb=$D/underlay_${version}_$own.deb
dpkgr -i "$deb" >"$T/dpkg.log" 2>&1 || { cat "$T/dpkg.log" >&2; die "dpkg --root -i $deb failed"; }
dpkgr -i "$deb" >>"$T/dpkg.log" 2>&1 || { cat "$T/dpkg.log" >&2; die "dpkg --root -i $deb (again: an upgrade) failed"; }
[ "$(dpkg --root="$root" -s underlay | sed -n 's/^Status: //p')" = "install ok installed" ] || die "underlay is not installed in $root"
[ "$(dpkg --root="$root" -s underlay | sed -n 's/^Version: //p')" = "$debversion" ] || die "installed version is not $debversion"
cmp -s "$root/usr/bin/underlay" "$D/underlay-linux-$own" || die "$root/usr/bin/underlay is not the release binary"
out=$(bash --norc -c 'source "$1"; COMP_WORDS=(underlay se); COMP_CWORD=1; _underlay; echo "${COMPREPLY[*]}"' _ "$root/usr/share/bash-completion/completions/underlay" 2>&1)
[ "$out" = serve ] || die "the installed bash completion completes 'underlay se' to '$out', not serve"
MANWIDTH=80 man -l "$root/usr/share/man/man8/underlay-serve.8.gz" 2>/dev/null | grep -q -- '--resolv-conf PATH' ||
	die "man -l $root/usr/share/man/man8/underlay-serve.8.gz does not show --resolv-conf PATH"
for w in multi-user.target.wants docker.service.wants; do
	l=$root/etc/systemd/system/$w/underlay.service
	[ -L "$l" ] && [ "$(readlink "$l")" = /lib/systemd/system/underlay.service ] ||
		die "postinst did not enable underlay.service ($l: $(ls -l "$l" 2>&1))"
done
# verify resolves ExecStart's /usr/bin/underlay and the units it names (sysinit.target,
# docker.service, ...) in the root: the host's systemd units are copied in for it, and removed
# after. A unit whose ExecStart is missing must fail it (the check can fail).
sysunits=/usr/lib/systemd/system
[ -f "$sysunits/sysinit.target" ] || die "no $sysunits/sysinit.target: systemd-analyze verify needs systemd's units"
mkdir -p "$root/usr/lib/systemd/system"
cp -a "$sysunits/." "$root/usr/lib/systemd/system/"
rm -f "$root/usr/lib/systemd/system/underlay.service"
[ -f "$root/usr/lib/systemd/system/docker.service" ] ||
	printf '[Unit]\nDescription=stand-in for Docker\n[Service]\nExecStart=/usr/bin/underlay version\n' >"$root/usr/lib/systemd/system/docker.service"
if ! out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$root" --man=no underlay.service 2>&1) || [ -n "$out" ]; then
	echo "$out" >&2
	die "systemd-analyze verify --root=$root underlay.service complained"
fi
sed 's#^ExecStart=/usr/bin/underlay #ExecStart=/usr/bin/underlay-missing #' "$root/lib/systemd/system/underlay.service" >"$root/etc/systemd/system/broken.service"
! SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --root="$root" --man=no broken.service >/dev/null 2>&1 ||
	die "systemd-analyze verify passed a unit whose ExecStart is missing: the check proves nothing"
rm -rf "$root/usr/lib/systemd" "$root/etc/systemd/system/broken.service"
say "ok: $deb installed into a scratch root (twice), unit enabled there, systemd-analyze verify: clean, completion and manual page work"
mkdir -p "$root/var/lib/underlay"
dpkgr --purge underlay >"$T/dpkg.log" 2>&1 || { cat "$T/dpkg.log" >&2; die "dpkg --root --purge underlay failed"; }
grep -q 'kept .*/var/lib/underlay' "$T/dpkg.log" || die "postrm purge did not say it keeps the state"
left=$(cd "$root" && find . ! -type d ! -path './var/lib/dpkg/*' | LC_ALL=C sort)
[ -z "$left" ] || die "after the purge $root still holds: $left"
! dpkg --root="$root" -s underlay >/dev/null 2>&1 || die "underlay still known to dpkg after the purge"
say "ok: purged: no file, no enablement left (the state directory kept)"
root2=$T/root-$other
mkdir -p "$root2/var/lib/dpkg/updates" "$root2/var/lib/dpkg/info"
: >"$root2/var/lib/dpkg/status"
dpkg --root="$root2" --force-script-chrootless --force-not-root --force-architecture --log=/dev/null \
	-i "$D/underlay_${version}_$other.deb" >"$T/dpkg2.log" 2>&1 || { cat "$T/dpkg2.log" >&2; die "dpkg --root -i of the $other .deb failed"; }
cmp -s "$root2/usr/bin/underlay" "$D/underlay-linux-$other" || die "the $other .deb did not install its binary"
say "ok: the $other .deb installs too (--force-architecture)"

# ---- 5. the plugin on a dockerd of the test's own, and through a registry ----
ns=underlay-release-$$
ip netns add "$ns" || die "ip netns add $ns"
cleanups+=("ip netns del $ns")
ip -n "$ns" link set lo up
# A parent for the test network (the host may lack the dummy module an internal network needs).
ip -n "$ns" link add relveth0 type veth peer name relveth1 || die "ip link add veth in $ns"
ip -n "$ns" link set relveth0 up
run=$(mktemp -d /run/underlay-release.XXXXXX)
cleanups+=("rm -rf --one-file-system $run")
sock=$run/docker.sock
export DOCKER_HOST=unix://$sock
innet() { nsenter --net="/run/netns/$ns" -- "$@"; }
mkdir -p "$T/docker" "$T/registry"
# nsenter itself, not innet, in the background: it execs dockerd, so $! is dockerd's PID.
nsenter --net="/run/netns/$ns" -- dockerd --data-root "$T/docker/root" --exec-root "$run/x" -H "$DOCKER_HOST" --pidfile "$run/docker.pid" \
	--bridge none --iptables=false --ip-masq=false --userland-proxy=false --storage-driver vfs \
	--exec-opt native.cgroupdriver=cgroupfs >"$T/dockerd.log" 2>&1 &
dpid=$!
cleanups+=("stop_dockerd")
stop_dockerd() {
	docker plugin ls -q 2>/dev/null | while read -r p; do docker plugin rm -f "$p" >/dev/null 2>&1 || true; done
	kill "$dpid" 2>/dev/null || true
	local i; for i in $(seq 60); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.5; done
	kill -0 "$dpid" 2>/dev/null && { echo "release/test.sh: dockerd did not stop in 30 s: SIGKILL" >&2; kill -9 "$dpid"; }
	wait "$dpid" 2>/dev/null || true
	grep " $T/" /proc/self/mountinfo | awk '{print $5}' | sort -r | while read -r m; do umount -l "$m" || true; done
}
for i in $(seq 120); do
	docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && break
	kill -0 "$dpid" 2>/dev/null || { tail -n 30 "$T/dockerd.log" >&2; die "dockerd exited at start"; }
	sleep 0.5
done
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || { tail -n 30 "$T/dockerd.log" >&2; die "dockerd did not answer in 60 s"; }
printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:5000\n' \
	"$T/registry/data" >"$T/registry/config.yml"
nsenter --net="/run/netns/$ns" -- docker-registry serve "$T/registry/config.yml" >"$T/registry.log" 2>&1 &
rpid=$!
cleanups+=("kill $rpid; wait $rpid 2>/dev/null")
for i in $(seq 60); do
	innet busybox wget -q -O /dev/null http://127.0.0.1:5000/v2/ 2>/dev/null && break
	kill -0 "$rpid" 2>/dev/null || { cat "$T/registry.log" >&2; die "docker-registry exited"; }
	sleep 0.5
done
dockerfail() { tail -n 40 "$T/dockerd.log" >&2; die "$*"; }
checknet() { # checknet DRIVER: a macvlan network on the namespace's veth with the plugin, removed again
	docker network create -d "$1" -o parent=relveth0 --subnet 198.18.77.0/24 release-test >/dev/null || dockerfail "docker network create -d $1 failed"
	[ "$(docker network inspect -f '{{.Driver}}' release-test)" = "$1" ] || dockerfail "network release-test is not of $1"
	docker network rm release-test >/dev/null || dockerfail "docker network rm release-test failed"
}
name=underlay-dist:$version-$own
docker plugin create "$name" "$D/plugin-linux-$own" >/dev/null || dockerfail "docker plugin create $name dist/plugin-linux-$own failed"
docker plugin enable "$name" >/dev/null || dockerfail "docker plugin enable $name failed"
[ "$(docker plugin inspect -f '{{.Enabled}}' "$name")" = true ] || dockerfail "$name is not enabled"
checknet "$name"
docker plugin disable "$name" >/dev/null && docker plugin rm "$name" >/dev/null || dockerfail "docker plugin rm $name failed"
say "ok: dist/plugin-linux-$own created and enabled on a dockerd of its own; a network with it created and removed"
release/plugin-push.sh "$D" 127.0.0.1:5000 "$version" 2>"$T/push.log" || { cat "$T/push.log" >&2; dockerfail "release/plugin-push.sh failed"; }
tags=$(innet busybox wget -q -O - http://127.0.0.1:5000/v2/underlay/tags/list) || die "cannot list the registry's tags"
for t in "$version-amd64" "$version-arm64" latest "$version-repair-amd64" "$version-repair-arm64" repair; do
	grep -qF "\"$t\"" <<<"$tags" || die "registry has no underlay:$t: $tags"
done
ref=127.0.0.1:5000/underlay:$version-$own
docker plugin install --grant-all-permissions "$ref" >/dev/null || dockerfail "docker plugin install $ref failed"
checknet "$ref"
[ -n "$(docker plugin ls -q)" ] || die "no plugin after the install"
say "ok: plugin-push pushed underlay:$version-amd64, -arm64, :latest and the repair plugin's -repair-amd64, -repair-arm64, :repair; $ref installed from the registry serves a network"
say "all release checks passed"
