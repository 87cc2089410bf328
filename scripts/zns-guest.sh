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
# metadata per block, where the FTL keeps its tags in the metadata; then
# (nameless-crash) nameless writes, frees and in-place collections killed
# the same way on a namespace without metadata (md in band), each round
# verifying every flushed block at its address and every block handed
# over, and (nameless-inplace) on a namespace with 64 bytes of metadata
# (md in OOB).
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

TAG=zns-guest
TIMEOUT=${ZNS_GUEST_TIMEOUT:-900}
WATCHDOG=${ZNS_GUEST_WATCHDOG:-600}
ONLY=${ZNS_GUEST_ONLY:-}
ONLY_VAR=ZNS_GUEST_ONLY
METADATA=${ZNS_GUEST_METADATA:-required}
GUEST_CPU=${ZNS_GUEST_CPU:-qemu64}
GUEST_SMP=${ZNS_GUEST_SMP:-1}
BENCH_SMP=${ZNS_GUEST_BENCH_SMP:-2}
# The harness shared with scripts/nbd-guest.sh: packages, kernel, static
# binaries, initramfs, the QEMU boot, run and outcome.
# shellcheck source=guest/lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/guest/lib.sh"

guest_prepare "${ZNS_GUEST_SKIP_INSTALL:-0}"
guest_build

WORK=$(mktemp -d "${TMPDIR:-/tmp}/zns-guest.XXXXXX")
if [ "${ZNS_GUEST_KEEP:-0}" != 1 ]; then
    trap 'rm -rf "$WORK"' EXIT
else
    echo "zns-guest: work directory $WORK"
fi

# The initramfs: static busybox as /init's shell, the NVMe modules, the binaries.
guest_initramfs

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

# boot NAME NS-OPTIONS [WHAT [SIZE]]: one guest boot on a fresh image of
# SIZE (default 2G) running WHAT (zftl.run=, default conformance); QEMU's
# exit status in BOOT_RC.
boot() {
    local name=$1 nsopts=$2 what=${3:-conformance} size=${4:-2G} img=$WORK/zns-$1.img
    local smp=$GUEST_SMP
    [ "$what" != bench ] || smp=$BENCH_SMP
    rm -f "$img"
    truncate -s "$size" "$img"
    echo "zns-guest: === $name: nvme-ns $nsopts"
    guest_qemu "$WORK/$name.log" "$smp" 1024 \
        "zftl.run=$what ZFTL_CRASH_ROUNDS=${ZNS_GUEST_CRASH_ROUNDS:-6} ZFTL_BENCH_SECONDS=${ZNS_GUEST_BENCH_SECONDS:-4} ZFTL_BENCH_JOBS=${ZNS_GUEST_BENCH_JOBS:-4} ZFTL_BENCH_FLAGS=${ZNS_GUEST_BENCH_FLAGS:-} ZFTL_BENCH_PERF=${ZNS_GUEST_PERF:-}" \
        -drive "file=$img,id=zns0,format=raw,if=none" \
        -device nvme,serial=deadbeef,id=nvme0 \
        -device "nvme-ns,drive=zns0,bus=nvme0,nsid=1,$nsopts"
    rm -f "$img"
}

# max_active below the zone count, so the conformance case open_close_limits
# can reach the active-zone limit (it needs max_active + 1 usable zones).
BASE="logical_block_size=4096,physical_block_size=4096,zoned=true,zoned.zone_size=64M,zoned.max_open=16,zoned.max_active=24"
FAILED_RUNS=()
# not_counted: a failed run under ZNS_GUEST_*=try is reported, not failed.
not_counted() {
    RUNS_FAILED=$((RUNS_FAILED - 1))
    RUNS_SKIPPED=$((RUNS_SKIPPED + 1))
}
run zcap-eq-zsze "$BASE,zoned.zone_capacity=0" || FAILED_RUNS+=(zcap-eq-zsze)
run zcap-lt-zsze "$BASE,zoned.zone_capacity=48M" || FAILED_RUNS+=(zcap-lt-zsze)
case "$METADATA" in
    skip)
        echo "zns-guest: metadata run skipped (ZNS_GUEST_METADATA=skip)"
        RUNS_SKIPPED=$((RUNS_SKIPPED + 1))
        ;;
    try)
        run metadata "$BASE,zoned.zone_capacity=0,ms=16" ||
            { echo "zns-guest: the metadata run failed; not counted (ZNS_GUEST_METADATA=try)"; not_counted; }
        ;;
    *) run metadata "$BASE,zoned.zone_capacity=0,ms=16" || FAILED_RUNS+=(metadata) ;;
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
    run ftl-crash "${CRASH_ARGS[@]}" || FAILED_RUNS+=(ftl-crash)
fi
# The crash test again on a namespace with 32 bytes of metadata per block,
# room for the FTL's tags: they go in the NVMe metadata (OOB) instead of
# the metadata log.
run ftl-crash-oob "${CRASH_ARGS[0]},ms=32" ftl-crash 512M || FAILED_RUNS+=(ftl-crash-oob)
# Nameless writes and frees killed mid-stream, the writer also starting
# in-place collections of zones it freed blocks in, so kills land inside
# jobs; zones of 4 MiB (capacity 3 MiB) so that they fill between kills.
# On a namespace without metadata: tags in band, so md in the log and the
# zones' md groups, and the jobs' staging index in md blocks.
NAMELESS_ZONES="logical_block_size=4096,physical_block_size=4096,zoned=true,zoned.zone_size=4M,zoned.zone_capacity=3M,zoned.max_open=16,zoned.max_active=24"
run nameless-crash "$NAMELESS_ZONES" nameless-crash 512M || FAILED_RUNS+=(nameless-crash)
# And with 64 bytes of metadata per block: tags and md in OOB.
run nameless-inplace "$NAMELESS_ZONES,ms=64" nameless-crash 512M || FAILED_RUNS+=(nameless-inplace)
run cli "$BASE,zoned.zone_capacity=0" cli || FAILED_RUNS+=(cli)
run nbd-kernel "$BASE,zoned.zone_capacity=0" nbd-kernel || FAILED_RUNS+=(nbd-kernel)

# The zoned block device path (/dev/nvme0n1 without /dev/ng0n1), with zone
# capacity below the zone size so the capacity of the v2 zone report counts.
run blkdev "$BASE,zoned.zone_capacity=48M" blkdev || FAILED_RUNS+=(blkdev)

# zftl bench zns: zftl over passthrough against fio's io_uring_cmd engine on
# the raw namespace, in one guest; prints the JSON report (ratios).
if wanted bench; then
    INITRD=$WORK/initramfs-bench.cpio.gz run bench "$BASE,zoned.zone_capacity=0" bench || FAILED_RUNS+=(bench)
else
    run bench "$BASE,zoned.zone_capacity=0" bench || FAILED_RUNS+=(bench)
fi

# Counted by .ci/run's closing line, like the test binaries' results.
guest_summary
