#!/bin/bash
# test/vm/run.sh TESTBINARY [ARGS...]
#
# Runs a static linux/amd64 test binary (CGO_ENABLED=0 go test -c) as root inside a throwaway
# QEMU VM that boots Debian's linux-image-cloud-amd64 kernel, which has the modules the host
# may lack (dummy, 8021q, ipvlan, macvlan, veth, bridge). ARGS go to the binary. With
# VM_ARCH=arm64 the binary (and UNDERLAY_BIN) are linux/arm64 and the VM is an emulated arm64
# machine (qemu-system-aarch64 -M virt) booting linux-image-cloud-arm64's kernel. Inside the VM the
# binary runs in /work with IN_VM=1 (and CI, if set here). Its stdout+stderr stream to our
# stdout and we exit with its status, or: 124 timeout, 125 VM died without reporting a status
# (kernel panic, crash), 3 kernel module missing or failed to load (tests not run), 2 usage
# or setup error. 3/124/125 also print the tail of the kernel console to stderr.
#
# Env: UNDERLAY_BIN      static daemon binary, copied to /bin/underlay and exported as
#                        UNDERLAY_BIN=/bin/underlay in the VM (optional)
#      VM_TIMEOUT        seconds before the VM is killed (900)
#      VM_MEM            guest memory in MiB (1024)
#      VM_CACHE          kernel+busybox cache (${XDG_CACHE_HOME:-$HOME/.cache}/underlay-vm; rm for a newer kernel)
#      VM_VERBOSE=1      print the whole kernel console to stderr after the run
#      VM_EXTRA_MODULES  more kernel modules to load (space separated)
#      VM_KVM=1          use KVM instead of software emulation (off: nested KVM can be broken)
#      VM_CPU            the emulated amd64 CPU model (qemu64). `max` makes every test about 1.4 times
#                        slower: Go's runtime and the kernel then take the AVX2 paths, which software
#                        emulation runs slowly (measured: 55 s against 38 s for the same three tests)
#      VM_ARCH           amd64 (default) or arm64. arm64: always software emulation (TCG, -cpu max
#                        with the cheap pointer-authentication algorithm), VM_CACHE defaults to
#                        .../underlay-vm-arm64, the kernel console is the PL011 (ttyAMA0) and the
#                        binary's output goes through a virtio console (hvc0; virtio_mmio and
#                        virtio_console are loaded first, their failures reported on ttyAMA0). The
#                        first run adds the arm64 dpkg architecture (dpkg --add-architecture arm64;
#                        apt-get update), installs qemu-system-arm and fetches busybox-static for
#                        the host's architecture too (the cpio and depmod that build the initramfs
#                        run on the host). VM_DOCKER=1 is amd64 only.
#      VM_SMP            guest CPUs (QEMU's default: 1)
#      VM_BUNDLE         more host executables (absolute paths, space separated; amd64 only) copied to
#                        the same paths in the VM with the shared libraries and ELF interpreter they
#                        link, e.g. /usr/sbin/dnsmasq for the IPv6 LAN tests' router and DHCPv6 server
#      VM_DOCKER=1       add the host's Docker engine (Debian's docker.io: dockerd, containerd,
#                        containerd-shim-runc-v2, runc, docker in /bin) with the shared libraries
#                        and ELF interpreter they link; /init then mounts cgroup2 on /sys/fs/cgroup,
#                        links /var/run to /run and exports DOCKER_RAMDISK=1 (the root is the
#                        initramfs: runc cannot pivot_root out of it). About 200 MB more initramfs:
#                        give it VM_MEM=2048.
#      VM_DOCKERD        with VM_DOCKER=1: the dockerd to bundle instead of Debian's (e.g. the current
#                        engine of `make engine-current`), copied to /bin/dockerd
#      VM_RUNC           with VM_DOCKER=1: the runc to bundle instead of Debian's (/bin/runc; the
#                        current engine needs runc >= 1.2). Both may be dynamically linked (runc's
#                        seccomp: libseccomp): their libraries are bundled as Debian's. Containerd,
#                        its shim and the docker CLI (20.10: API 1.41, which current engines accept)
#                        stay Debian's.
# The first run needs root: it installs qemu-system-x86 and fetches (apt-get download, never
# installs) the kernel package and busybox-static, unpacked into VM_CACHE.
set -euo pipefail

die() { local code=$1; shift; echo "vm/run.sh: $*" >&2; exit "$code"; }
[ $# -ge 1 ] || { sed -n '2,/^set -e/{/^set/d;s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
ARCH=${VM_ARCH:-amd64}
case $ARCH in
  amd64) QEMU=qemu-system-x86_64 QPKG=qemu-system-x86 KPKG=linux-image-cloud-amd64 CACHEDIR=underlay-vm
         BBPKGS=busybox-static TTY=ttyS1 EARLY= ;;
  arm64) QEMU=qemu-system-aarch64 QPKG=qemu-system-arm KPKG=linux-image-cloud-arm64:arm64 CACHEDIR=underlay-vm-arm64
         BBPKGS="busybox-static:arm64 busybox-static:$(dpkg --print-architecture)" TTY=hvc0 EARLY="virtio_mmio virtio_console"
         [ "${VM_DOCKER:-0}" != 1 ] || die 2 "VM_DOCKER=1 is amd64 only" ;;
  *) die 2 "VM_ARCH=$ARCH: want amd64 or arm64" ;;
esac
[ "${VM_DOCKER:-0}" = 1 ] || [ -z "${VM_DOCKERD:-}${VM_RUNC:-}" ] || die 2 "VM_DOCKERD and VM_RUNC need VM_DOCKER=1"
for b in "$1" ${UNDERLAY_BIN:+"$UNDERLAY_BIN"}; do
  [ -f "$b" ] || die 2 "$b: no such file"
  ! ldd "$b" >/dev/null 2>&1 || die 2 "$b is dynamically linked; build it with CGO_ENABLED=0"
  [ "${VM_ARCH:-amd64}" = amd64 ] || ! grep -qa 'ld-linux-aarch64' "$b" ||
    die 2 "$b names an ELF interpreter (dynamically linked); build it with CGO_ENABLED=0"
done
BIN=$(readlink -f "$1"); shift
TIMEOUT=${VM_TIMEOUT:-900}; VERBOSE=${VM_VERBOSE:-0}
CACHE=${VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/$CACHEDIR}
MODULES="dummy 8021q ipvlan macvlan veth bridge ${VM_EXTRA_MODULES:-}"

# ---- one-time setup (root): qemu, plus kernel and busybox unpacked into $CACHE/root ----
updated=
retry() { "$@" && return; [ -z "$updated" ] || return 1; updated=1; apt-get -q update >&2 && "$@"; }
fetch() {  # apt-get download checks the files against the signed package lists
  local k; k=$(apt-cache depends $KPKG | awk '/Depends: linux-image-/{print $2; exit}')
  [ -n "$k" ] && (cd "$CACHE/deb" && apt-get -q -o APT::Sandbox::User=root download "$k" $BBPKGS >&2); }
if ! command -v $QEMU >/dev/null || [ ! -e "$CACHE/ok" ]; then
  [ "$(id -u)" = 0 ] || die 2 "first run needs root (installs $QPKG, fills $CACHE)"
  export DEBIAN_FRONTEND=noninteractive
  mkdir -p "$CACHE"; exec 9>"$CACHE/lock"; flock 9
  if [ "$ARCH" = arm64 ] && [ "$(dpkg --print-architecture)" != arm64 ] &&
     ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "vm/run.sh: adding the arm64 dpkg architecture (to apt-get download arm64 packages)" >&2
    dpkg --add-architecture arm64 || die 2 "dpkg --add-architecture arm64 failed"
    updated=1; apt-get -q update >&2 || die 2 "apt-get update failed after adding the arm64 architecture"
  fi
  command -v $QEMU >/dev/null ||
    retry apt-get -q install -y --no-install-recommends $QPKG >&2 || die 2 "cannot install $QPKG"
  if [ ! -e "$CACHE/ok" ]; then
    echo "vm/run.sh: fetching kernel and busybox into $CACHE" >&2
    rm -rf "$CACHE/root" "$CACHE/host" "$CACHE/deb"; mkdir -p "$CACHE/deb"
    retry fetch || die 2 "cannot download ${KPKG%:*}'s kernel or $BBPKGS"
    for d in "$CACHE"/deb/*.deb; do
      if [ "$ARCH" != amd64 ] && [[ $d == *busybox-static_*_"$(dpkg --print-architecture)".deb ]]; then
        dpkg-deb -x "$d" "$CACHE/host"
      else
        dpkg-deb -x "$d" "$CACHE/root"
      fi
    done
    HBB=$CACHE/root/bin/busybox; [ "$ARCH" = amd64 ] || HBB=$CACHE/host/bin/busybox   # a busybox that runs here
    "$HBB" depmod -b "$CACHE/root" "$(ls "$CACHE/root/lib/modules")"  # .deb has no modules.dep
    rm -rf "$CACHE/deb"; touch "$CACHE/ok"
  fi
  exec 9>&-
fi
KVER=$(ls "$CACHE/root/lib/modules"); KD=$CACHE/root/lib/modules/$KVER; BB=$CACHE/root/bin/busybox
HBB=$BB; [ "$ARCH" = amd64 ] || HBB=$CACHE/host/bin/busybox

# ---- initramfs: busybox, the modules in load order, the binaries, /init ----
W=$(mktemp -d "${TMPDIR:-/tmp}/underlay-vm.XXXXXX"); trap 'rm -rf "$W"' EXIT
trap 'echo "vm/run.sh: interrupted" >&2; exit 130' INT TERM
R=$W/root; mkdir -p "$R"/{bin,etc,dev,proc,sys,run,tmp,root,work,mod,t}
cp "$BB" "$R/bin/busybox"; ln -s busybox "$R/bin/sh"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$R/etc/hosts"
echo 'root:x:0:0:root:/root:/bin/sh' >"$R/etc/passwd"
T=/t/${BIN##*/}; cp "$BIN" "$R$T"
[ -z "${UNDERLAY_BIN:-}" ] || cp "$UNDERLAY_BIN" "$R/bin/underlay"
SETUP=
libs=()
withlibs() {  # $1 into the VM at $2, and the libraries it links (copied after the loop below)
  cp "$1" "$R$2"
  mapfile -t -O "${#libs[@]}" libs < <(ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
}
for p in ${VM_BUNDLE:-}; do
  [ "$ARCH" = amd64 ] || die 2 "VM_BUNDLE is amd64 only (host executables)"
  [[ $p == /* ]] && [ -f "$p" ] && [ -x "$p" ] || die 2 "VM_BUNDLE: $p: want the absolute path of an executable (installed? test/deps.sh installs the suites' packages)"
  mkdir -p "$R${p%/*}"; withlibs "$p" "$p"
done
if [ "${VM_DOCKER:-0}" = 1 ]; then
  for n in dockerd containerd containerd-shim-runc-v2 runc docker; do
    p=
    case $n in
      dockerd) p=${VM_DOCKERD:-} ;;
      runc) p=${VM_RUNC:-} ;;
    esac
    if [ -n "$p" ]; then
      [ -f "$p" ] && [ -x "$p" ] || die 2 "VM_DOCKER=1: $p (VM_${n^^}): no such executable"
    else
      p=$(PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v "$n") || die 2 "VM_DOCKER=1: $n not found (apt-get install docker.io)"
    fi
    withlibs "$p" "/bin/$n"
  done
  SETUP="mkdir -p /sys/fs/cgroup /var /etc/docker; mount -t cgroup2 cgroup2 /sys/fs/cgroup; ln -s /run /var/run; export DOCKER_RAMDISK=1"
fi
for l in $(printf '%s\n' "${libs[@]}" | sort -u); do
  mkdir -p "$R${l%/*}"; cp -L "$l" "$R$l"
done
declare -A seen=(); LOAD=
for m in $EARLY @ $MODULES; do
  [ "$m" != @ ] || { EARLYLOAD=$LOAD; LOAD=; continue; }   # EARLY (arm64's console) load apart
  pat=${m//[-_]/[-_]}   # file names may spell _ as -
  grep -qE "/$pat\.ko\$" "$KD/modules.builtin" && continue
  line=$(grep -E "(^|/)$pat\.ko:" "$KD/modules.dep") || die 3 "kernel module $m is not in kernel $KVER"
  read -ra deps <<<"${line#*:}"; order=()   # all its dependencies; the last loads first
  for f in "${deps[@]}"; do order=("$f" "${order[@]}"); done
  for f in "${order[@]}" "${line%%:*}"; do
    n=$(basename "$f" .ko)
    [ -z "${seen[$n]:-}" ] || continue; seen[$n]=1
    cp "$KD/$f" "$R/mod/"; LOAD+=" $n"
  done
done
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }   # single-quote for /bin/sh
CMD=$(q "$T"); for a in "$@"; do CMD+=" $(q "$a")"; done
ENV="IN_VM=1"; [ -z "${CI+set}" ] || ENV+=" CI=$(q "$CI")"
[ -z "${UNDERLAY_BIN:-}" ] || ENV+=" UNDERLAY_BIN=/bin/underlay"
MARK="UNDERLAY_VM_$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
EARLYINIT=   # arm64: the output's virtio console is modules; their failures go to the kernel console
[ -z "$EARLYLOAD" ] || EARLYINIT="
for m in$EARLYLOAD; do insmod /mod/\$m.ko || { echo \"$MARK insmod \$m\" >/dev/console; poweroff -f; }; done
i=0; while [ ! -e /dev/$TTY ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done
[ -e /dev/$TTY ] || { echo \"$MARK insmod $TTY(no-device)\" >/dev/console; poweroff -f; }"
cat >"$R/init" <<EOF
#!/bin/sh
export PATH=/bin HOME=/root TMPDIR=/tmp $ENV
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs run /run; mount -t tmpfs tmp /tmp; mkdir -p /run/netns
$SETUP$EARLYINIT
stty -F /dev/$TTY raw -echo
for m in$LOAD; do
  p=; [ \$m = dummy ] && p=numdummies=0
  insmod /mod/\$m.ko \$p >/dev/$TTY 2>&1 || { echo "$MARK insmod \$m" >/dev/$TTY; poweroff -f; }
done
ip link set lo up
cd /work && $CMD </dev/null >/dev/$TTY 2>&1
echo "$MARK exit \$?" >/dev/$TTY
poweroff -f
EOF
chmod 755 "$R/init"
(cd "$R" && find . | "$HBB" cpio -o -H newc 2>/dev/null) >"$W/initrd"

# ---- boot: ttyS0 = kernel console (file), ttyS1 = the binary's output (stdout) ----
ACCEL="-accel tcg -cpu ${VM_CPU:-qemu64}"; [ "${VM_KVM:-0}" = 1 ] && ACCEL="-accel kvm -cpu host"
QUIET=quiet; [ "$VERBOSE" = 1 ] && QUIET=
MARKS=("$W/out")
if [ "$ARCH" = arm64 ]; then   # ttyAMA0 = kernel console (file), hvc0 = the binary's output (stdout)
  MACHINE=(-M virt -accel tcg -cpu max,pauth-impdef=on -serial "file:$W/console"
    -device virtio-serial-device -chardev stdio,id=out,signal=off -device virtconsole,chardev=out)
  CONSOLE=ttyAMA0; MARKS+=("$W/console")
else
  MACHINE=($ACCEL -serial "file:$W/console" -serial stdio); CONSOLE=ttyS0
fi
[ -z "${VM_SMP:-}" ] || MACHINE+=(-smp "$VM_SMP")
set +e
timeout --foreground -k 5 "$TIMEOUT" $QEMU "${MACHINE[@]}" -m "${VM_MEM:-1024}" \
  -nodefaults -no-user-config -display none -no-reboot -nic none \
  -kernel "$CACHE/root/boot/vmlinuz-$KVER" \
  -initrd "$W/initrd" -append "console=$CONSOLE panic=-1 $QUIET" </dev/null |
  tee "$W/out" | sed -u -e 's/\r$//' -e "/$MARK /{s/$MARK .*//;/^\$/d;}"
qrc=${PIPESTATUS[0]}
set -e
touch "$W/console"
read -r what val < <(cat "${MARKS[@]}" | tr -d '\r' | sed -n "s/.*$MARK //p" | tail -n 1) || true
case ${what:-} in
  exit) rc=$val ;;
  insmod) rc=3; echo "vm/run.sh: kernel module $val failed to load in the VM; tests not run" >&2 ;;
  *) if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then rc=124; echo "vm/run.sh: timed out after ${TIMEOUT}s" >&2
     else rc=125; echo "vm/run.sh: VM died without reporting an exit status (qemu rc=$qrc)" >&2; fi ;;
esac
if [ "$VERBOSE" = 1 ] || [ "$rc" = 3 ] || [ "$rc" = 124 ] || [ "$rc" = 125 ]; then
  lines=60; [ "$VERBOSE" = 1 ] && lines=+1
  echo "---- vm/run.sh: kernel console ($KVER) ----" >&2
  sed -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\r//g' "$W/console" | tail -n "$lines" >&2
  [ "$rc" != 125 ] || [ -s "$W/console" ] || echo "(empty: the VM stopped before the kernel printed anything; too little VM_MEM?)" >&2
fi
exit "$rc"
