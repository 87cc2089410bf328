#!/usr/bin/env bash
# Boot a QEMU guest (software CPU) with an emulated NVMe ZNS namespace and run
# zftl's backend conformance suite inside it on /dev/ng0n1 (io_uring NVMe
# passthrough), once per namespace configuration:
#
#   zcap=zsze   2 GiB, 64 MiB zones, zone capacity = zone size
#   zcap<zsze   2 GiB, 64 MiB zones, zone capacity 48 MiB
#   metadata    as the first, with 16 bytes of per-block metadata (OOB,
#               QEMU's ms=16, separate buffer); required by default,
#               ZNS_GUEST_METADATA=try reports its failure without failing,
#               ZNS_GUEST_METADATA=skip leaves it out
#             ZNS_GUEST_CRASH=try: report the FTL crash run without failing
#
# and then the FTL's crash test (zns-ftl-crash, its own guest boot): zftl
# formatted on /dev/ng0n1, a writer process killed with SIGKILL in the
# middle of flushed writes, several rounds, each followed by a fresh
# process that remounts and verifies every block (ZNS_GUEST_CRASH_ROUNDS,
# default 6); then again (ftl-crash-oob) on a namespace with 32 bytes of
# metadata per block, where the FTL keeps its tags in the metadata.
#
# Then the CLI (its own guest boot): zftl info / format / stats / check
# --device on /dev/ng0n1 and zftl serve --device with a write and verify
# through NBD (nbd-round-trip) across a server restart.
#
# Then the kernel's NBD client (its own guest boot, run nbd-kernel):
# zftl serve --device /dev/ng0n1, nbd-client attaches the export as
# /dev/nbd0, mkfs.ext4, mount, write a tree of files, and e2fsck and
# checksums after a clean server restart and after a kill -9 of the server
# right after a sync.
#
# Then the zoned block device path (blkdev, its own boot): /dev/nvme0n1
# with /dev/ng0n1 removed, so the backend falls back to positional I/O and
# the BLK*ZONE ioctls; the conformance suite, format, check and serve.
#
# Last zftl bench zns (bench, its own boot, with fio and its libraries
# added to the initramfs): JSON with IOPS, MiB/s and the ratios of zftl to
# the raw namespace. ZNS_GUEST_BENCH_SECONDS (default 4) per job and round,
# ZNS_GUEST_BENCH_JOBS (default 4) the commands in flight on each side
# (fio jobs on distinct zones at iodepth 1; zftl writes),
# ZNS_GUEST_BENCH_FLAGS more flags of zftl bench zns, comma-separated (e.g.
# --cpu-costs). ZNS_GUEST_SMP (default 1) QEMU's -smp;
# ZNS_GUEST_BENCH_SMP (default 2) the bench's: zftl's writers run on one
# thread beside the one that runs the core, as `zftl serve --device`
# runs its connection tasks beside its driver thread. The guest's clock
# is the TSC (clocksource=tsc): the kernel picked the HPET with 2 vCPUs,
# and every HPET read traps into QEMU (13.7 % of one bench's samples).
# ZNS_GUEST_PERF=1 runs the bench under perf in the guest (perf copied from
# the host) and prints where zftl's CPU time went. ZNS_GUEST_CPU sets
# QEMU's -cpu (default qemu64: with -cpu max glibc picks AVX string
# functions that TCG emulates slowly: zftl's 128 KiB rate fell from 124 to
# 68 MiB/s in one comparison).
#
# Must run as root: it installs Debian packages (QEMU, a guest kernel,
# busybox) with apt-get. Any failure inside a guest, a guest that never
# reports (panic, hang, plain poweroff) or a missing prerequisite fails the
# script with a message saying which.
#
# Environment: ZNS_GUEST_TIMEOUT (seconds per guest boot, default 900),
# ZNS_GUEST_WATCHDOG (seconds before the guest itself reports a hung run,
# with the blocked tasks' stacks, default 600; a hung run boots once more),
# ZNS_GUEST_SKIP_INSTALL=1 (skip apt-get), ZNS_GUEST_ONLY="NAME ..." (boot
# only the named runs, for debugging; the others are reported as skipped), ZNS_GUEST_KEEP=1 (keep the work
# directory), CARGO_TARGET_DIR (as for cargo).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TIMEOUT=${ZNS_GUEST_TIMEOUT:-900}
WATCHDOG=${ZNS_GUEST_WATCHDOG:-600}
METADATA=${ZNS_GUEST_METADATA:-required}
GUEST_CPU=${ZNS_GUEST_CPU:-qemu64}
GUEST_SMP=${ZNS_GUEST_SMP:-1}
BENCH_SMP=${ZNS_GUEST_BENCH_SMP:-2}

die() {
    echo "zns-guest: FAIL: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages with apt-get and boots QEMU); nothing was tested"

if [ "${ZNS_GUEST_SKIP_INSTALL:-0}" != 1 ]; then
    echo "zns-guest: installing qemu-system-x86 linux-image-amd64 busybox-static cpio nbd-client e2fsprogs fio"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed; nothing was tested"
    apt-get install -y -qq qemu-system-x86 linux-image-amd64 busybox-static cpio nbd-client e2fsprogs fio >/dev/null ||
        die "apt-get install failed; nothing was tested"
fi
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found; nothing was tested"
BUSYBOX=$(command -v busybox) || die "busybox not found; nothing was tested"
if command -v file >/dev/null && file -L "$BUSYBOX" | grep -q "dynamically linked"; then
    die "$BUSYBOX is not static (install busybox-static)"
fi
KERNEL=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
[ -n "$KERNEL" ] || die "no guest kernel in /boot (install linux-image-amd64); nothing was tested"
KVER=${KERNEL#/boot/vmlinuz-}
MODDIR=/lib/modules/$KVER
[ -d "$MODDIR" ] || die "no modules for $KVER in $MODDIR"
# Dynamically linked host programs the guest runs (copied with their
# shared libraries by add_program).
GUEST_PROGRAMS="nbd-client mkfs.ext4 e2fsck"
for p in $GUEST_PROGRAMS; do
    command -v "$p" >/dev/null || die "$p not found (install nbd-client e2fsprogs); nothing was tested"
done

echo "zns-guest: building zns-conformance, zns-ftl-crash, nbd-round-trip and zftl (static)"
(
    cd "$REPO"
    RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -q \
        -p zftl-zns --features zftl-zns/conformance --bin zns-conformance --bin zns-ftl-crash \
        -p zftl-nbd --bin nbd-round-trip -p zftl-cli --bin zftl --target x86_64-unknown-linux-gnu
) || die "cargo build of the guest binaries failed"
BINDIR=${CARGO_TARGET_DIR:-$REPO/target}/x86_64-unknown-linux-gnu/release
GUEST_BINS="zns-conformance zns-ftl-crash nbd-round-trip zftl"
for b in $GUEST_BINS; do
    [ -x "$BINDIR/$b" ] || die "built binary not found at $BINDIR/$b"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/zns-guest.XXXXXX")
if [ "${ZNS_GUEST_KEEP:-0}" != 1 ]; then
    trap 'rm -rf "$WORK"' EXIT
else
    echo "zns-guest: work directory $WORK"
fi

# The initramfs: static busybox as /init's shell, the NVMe modules, the binary.
ROOT=$WORK/root
mkdir -p "$ROOT"/{bin,dev,proc,sys,lib/modules}
cp "$BUSYBOX" "$ROOT/bin/busybox"
for applet in sh mount umount insmod sleep cat dd printf echo ls grep poweroff ifconfig wc \
    mkdir cp rm sync kill find sort xargs sha256sum seq head tee dmesg tail ps; do
    ln -s busybox "$ROOT/bin/$applet"
done
# add_program DIR NAME: copy a dynamically linked host program to DIR/bin
# and the shared libraries ldd lists (with the loader) to the same paths
# under DIR.
add_program() {
    local dir=$1 bin lib
    bin=$(command -v "$2") || die "$2 not found"
    mkdir -p "$dir/bin"
    cp "$bin" "$dir/bin/"
    for lib in $(ldd "$bin" | grep -oE '/[^ ]+'); do
        mkdir -p "$dir$(dirname "$lib")"
        cp -L "$lib" "$dir$lib"
    done
    [ -n "$(ls "$dir"/lib64/ld-linux-* 2>/dev/null)" ] || die "ldd $bin named no dynamic loader in /lib64"
}
for p in $GUEST_PROGRAMS; do add_program "$ROOT" "$p"; done
# The NVMe driver, then (loaded by the nbd-kernel run only) ext4 and nbd.
for m in crct10dif_common crc-t10dif crc64 crc64-rocksoft t10-pi nvme-core nvme \
    crc16 mbcache jbd2 crc32c_generic ext4 nbd; do
    ko=$(find "$MODDIR" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" \) | head -n 1)
    [ -n "$ko" ] || die "module $m not found under $MODDIR"
    case "$ko" in
        *.xz) xz -dc "$ko" >"$ROOT/lib/modules/$m.ko" ;;
        *.zst) zstd -qdc "$ko" >"$ROOT/lib/modules/$m.ko" ;;
        *) cp "$ko" "$ROOT/lib/modules/$m.ko" ;;
    esac
done
cp "$REPO/scripts/zns-guest/init" "$ROOT/init"
chmod +x "$ROOT/init"
for b in $GUEST_BINS; do cp "$BINDIR/$b" "$ROOT/bin/"; done
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initramfs.cpio.gz"

# wanted NAME: whether the run NAME is to boot (ZNS_GUEST_ONLY).
wanted() {
    [ -z "${ZNS_GUEST_ONLY:-}" ] || [[ " $ZNS_GUEST_ONLY " == *" $1 "* ]]
}

# The bench run's extra archive: fio with its shared libraries and the
# dynamic loader (the guest is busybox only), appended to the initramfs
# (the kernel unpacks concatenated archives) so the other runs stay small.
if wanted bench; then
    FIO=$(command -v fio) || die "fio not found (apt-get install fio): the bench run needs it"
    FIOROOT=$WORK/fioroot
    mkdir -p "$FIOROOT/tmp"
    add_program "$FIOROOT" "$FIO"
    if [ -n "${ZNS_GUEST_PERF:-}" ]; then
        command -v perf >/dev/null || die "ZNS_GUEST_PERF needs perf on the host (Debian: linux-perf)"
        add_program "$FIOROOT" perf
    fi
    (cd "$FIOROOT" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/fio.cpio.gz"
    cat "$WORK/initramfs.cpio.gz" "$WORK/fio.cpio.gz" >"$WORK/initramfs-bench.cpio.gz"
fi

# QEMU's exit status when the guest's watchdog reports a hung run (status 5).
HUNG=$(((5 << 1) | 1))
HUNG_ONCE=()

# run NAME NS-OPTIONS [WHAT [SIZE]]: boot one guest on a fresh image of
# SIZE (default 2G) and run WHAT in it (zftl.run=, default conformance);
# returns 0 only if the guest reported exit status 0. A run whose guest
# hangs is booted once more (QEMU 7.2's controller can stall for good,
# docs/zns.md); the hung boot's stacks stay in the output, and the summary
# names the run.
run() {
    local name=$1 start
    if [ -n "${ZNS_GUEST_ONLY:-}" ] && ! [[ " $ZNS_GUEST_ONLY " == *" $name "* ]]; then
        echo "zns-guest: $name: SKIPPED (not in ZNS_GUEST_ONLY=$ZNS_GUEST_ONLY)"
        RUNS_SKIPPED=$((RUNS_SKIPPED + 1))
        return 0
    fi
    start=$(date +%s)
    boot "$@"
    if [ "$BOOT_RC" -eq "$HUNG" ]; then
        echo "zns-guest: $name: the guest hung (stacks above); booting it once more"
        HUNG_ONCE+=("$name")
        boot "$@"
    fi
    if outcome "$name" "$BOOT_RC" "$(($(date +%s) - start))"; then
        RUNS_PASSED=$((RUNS_PASSED + 1))
        return 0
    fi
    RUNS_FAILED=$((RUNS_FAILED + 1))
    return 1
}

# boot NAME NS-OPTIONS [WHAT [SIZE]]: one guest boot; QEMU's exit status in BOOT_RC.
boot() {
    local name=$1 nsopts=$2 what=${3:-conformance} size=${4:-2G} img=$WORK/zns-$1.img log=$WORK/$1.log
    local smp=$GUEST_SMP
    [ "$what" != bench ] || smp=$BENCH_SMP
    rm -f "$img"
    truncate -s "$size" "$img"
    echo "zns-guest: === $name: nvme-ns $nsopts"
    set +e
    timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu "$GUEST_CPU" -m 1024 -smp "$smp" \
        -display none -nodefaults -serial stdio -no-reboot \
        -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
        -kernel "$KERNEL" -initrd "${INITRD:-$WORK/initramfs.cpio.gz}" \
        -append "console=ttyS0 panic=-1 rdinit=/init quiet clocksource=tsc tsc=reliable zftl.run=$what zftl.watchdog=$WATCHDOG ZFTL_CRASH_ROUNDS=${ZNS_GUEST_CRASH_ROUNDS:-6} ZFTL_BENCH_SECONDS=${ZNS_GUEST_BENCH_SECONDS:-4} ZFTL_BENCH_JOBS=${ZNS_GUEST_BENCH_JOBS:-4} ZFTL_BENCH_FLAGS=${ZNS_GUEST_BENCH_FLAGS:-} ZFTL_BENCH_PERF=${ZNS_GUEST_PERF:-}" \
        -drive "file=$img,id=zns0,format=raw,if=none" \
        -device nvme,serial=deadbeef,id=nvme0 \
        -device "nvme-ns,drive=zns0,bus=nvme0,nsid=1,$nsopts" \
        </dev/null 2>&1 | tee "$log"
    BOOT_RC=${PIPESTATUS[0]}
    set -e
    rm -f "$img"
}

# outcome NAME RC SECONDS: say what QEMU's exit status RC means; 0 for a pass.
outcome() {
    local name=$1 rc=$2 secs=$3
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "zns-guest: $name: FAIL: the guest did not finish within ${TIMEOUT}s (${secs}s)"
        return 1
    elif [ "$rc" -eq 0 ]; then
        echo "zns-guest: $name: FAIL: the guest never reported (plain poweroff, panic or crash) (${secs}s)"
        return 1
    elif [ "$rc" -eq "$HUNG" ]; then
        echo "zns-guest: $name: FAIL: hung: the guest's watchdog fired after ${WATCHDOG}s (blocked tasks above) (${secs}s)"
        return 1
    elif [ $((rc & 1)) -eq 1 ] && [ $((rc >> 1)) -eq 0 ]; then
        echo "zns-guest: $name: PASS (${secs}s)"
        return 0
    elif [ $((rc & 1)) -eq 1 ]; then
        echo "zns-guest: $name: FAIL: the guest reported exit status $((rc >> 1)) (${secs}s)"
        return 1
    else
        echo "zns-guest: $name: FAIL: qemu exited with $rc (${secs}s)"
        return 1
    fi
}

# max_active below the zone count, so the conformance case open_close_limits
# can reach the active-zone limit (it needs max_active + 1 usable zones).
BASE="logical_block_size=4096,physical_block_size=4096,zoned=true,zoned.zone_size=64M,zoned.max_open=16,zoned.max_active=24"
failed=()
RUNS_PASSED=0 RUNS_FAILED=0 RUNS_SKIPPED=0
# not_counted: a failed run under ZNS_GUEST_*=try is reported, not failed.
not_counted() {
    RUNS_FAILED=$((RUNS_FAILED - 1))
    RUNS_SKIPPED=$((RUNS_SKIPPED + 1))
}
run zcap-eq-zsze "$BASE,zoned.zone_capacity=0" || failed+=(zcap-eq-zsze)
run zcap-lt-zsze "$BASE,zoned.zone_capacity=48M" || failed+=(zcap-lt-zsze)
case "$METADATA" in
    skip)
        echo "zns-guest: metadata run skipped (ZNS_GUEST_METADATA=skip)"
        RUNS_SKIPPED=$((RUNS_SKIPPED + 1))
        ;;
    try)
        run metadata "$BASE,zoned.zone_capacity=0,ms=16" ||
            { echo "zns-guest: the metadata run failed; not counted (ZNS_GUEST_METADATA=try)"; not_counted; }
        ;;
    *) run metadata "$BASE,zoned.zone_capacity=0,ms=16" || failed+=(metadata) ;;
esac

# The crash test on a small namespace (32 zones of 16 MiB, capacity 12 MiB)
# so that garbage collection runs between the kills. QEMU 7.2's controller
# sometimes stops completing commands; the dead writer's io_uring (which a
# 6.1 kernel cannot cancel) then holds the device until the NVMe driver's
# timeout, abort and controller reset (about 60 s): zns-ftl-crash waits for
# that (see docs/zns.md). ZNS_GUEST_CRASH=try reports a failure without
# failing the script.
CRASH_ARGS=("logical_block_size=4096,physical_block_size=4096,zoned=true,zoned.zone_size=16M,zoned.zone_capacity=12M,zoned.max_open=16,zoned.max_active=24" ftl-crash 512M)
if [ "${ZNS_GUEST_CRASH:-required}" = try ]; then
    run ftl-crash "${CRASH_ARGS[@]}" ||
        { echo "zns-guest: the ftl-crash run failed; not counted (ZNS_GUEST_CRASH=try)"; not_counted; }
else
    run ftl-crash "${CRASH_ARGS[@]}" || failed+=(ftl-crash)
fi
# The crash test again on a namespace with 32 bytes of metadata per block,
# room for the FTL's tags: they go in the NVMe metadata (OOB) instead of
# the metadata log.
run ftl-crash-oob "${CRASH_ARGS[0]},ms=32" ftl-crash 512M || failed+=(ftl-crash-oob)
run cli "$BASE,zoned.zone_capacity=0" cli || failed+=(cli)
run nbd-kernel "$BASE,zoned.zone_capacity=0" nbd-kernel || failed+=(nbd-kernel)

# The zoned block device path (/dev/nvme0n1 without /dev/ng0n1), with zone
# capacity below the zone size so the capacity of the v2 zone report counts.
run blkdev "$BASE,zoned.zone_capacity=48M" blkdev || failed+=(blkdev)

# zftl bench zns: zftl over passthrough against fio's io_uring_cmd engine on
# the raw namespace, in one guest; prints the JSON report (ratios).
if wanted bench; then
    INITRD=$WORK/initramfs-bench.cpio.gz run bench "$BASE,zoned.zone_capacity=0" bench || failed+=(bench)
else
    run bench "$BASE,zoned.zone_capacity=0" bench || failed+=(bench)
fi

# Counted by .ci/run's closing line, like the test binaries' results.
echo "zns-guest: summary: $RUNS_PASSED passed, $RUNS_FAILED failed, $RUNS_SKIPPED skipped"
if [ ${#HUNG_ONCE[@]} -gt 0 ]; then
    echo "zns-guest: NOTE: hung once and booted again: ${HUNG_ONCE[*]} (the hung boot's stacks are in the log)"
fi
if [ ${#failed[@]} -gt 0 ]; then
    die "failed runs: ${failed[*]}"
fi
if [ -n "${ZNS_GUEST_ONLY:-}" ]; then
    echo "zns-guest: the runs in ZNS_GUEST_ONLY=$ZNS_GUEST_ONLY passed; the others were SKIPPED"
else
    echo "zns-guest: all required runs passed"
fi
