# The QEMU guest harness shared by scripts/zns-guest.sh and
# scripts/nbd-guest.sh (sourced, not run): the Debian packages, the guest
# kernel and its modules, the static zftl binaries, a busybox initramfs
# with scripts/guest/init as /init, one QEMU boot under the software CPU,
# and what QEMU's exit status says. The guest's init runs the test named
# by zftl.run= and writes its exit status to the isa-debug-exit port
# (0xf4); QEMU then exits with (status << 1) | 1. A guest that never gets
# there (panic, hang, plain poweroff) exits QEMU with 0.
#
# The sourcing script sets TAG (the prefix of its messages), TIMEOUT
# (seconds per boot), WATCHDOG (seconds before the guest itself reports a
# hung run), ONLY (names of the runs to boot; empty: all) and ONLY_VAR (the
# environment variable ONLY came from, for messages), optionally GUEST_CPU
# (QEMU's -cpu, default qemu64), and WORK (a work directory), and defines `boot NAME ARGS...` (one boot; QEMU's exit status
# in BOOT_RC), which `run` calls.

GUEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$GUEST_DIR/../.." && pwd)

die() {
    echo "$TAG: FAIL: $*" >&2
    exit 1
}

# Dynamically linked host programs the guest runs (copied with their
# shared libraries by add_program).
GUEST_PROGRAMS="nbd-client mkfs.ext4 e2fsck"

# guest_prepare SKIP_INSTALL: root; the Debian packages (unless
# SKIP_INSTALL is 1); static busybox; the newest guest kernel in /boot
# (KERNEL, KVER) and its modules (MODDIR); GUEST_PROGRAMS on the host.
guest_prepare() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages with apt-get and boots QEMU); nothing was tested"
    if [ "${1:-0}" != 1 ]; then
        echo "$TAG: installing qemu-system-x86 linux-image-amd64 busybox-static cpio nbd-client e2fsprogs fio"
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
    local p
    for p in $GUEST_PROGRAMS; do
        command -v "$p" >/dev/null || die "$p not found (install nbd-client e2fsprogs); nothing was tested"
    done
}

# guest_build: the guest's binaries, statically linked, into BINDIR. One
# cargo command for both harnesses, so that the second finds them built.
GUEST_BINS="zns-conformance zns-ftl-crash zns-nameless-crash nbd-round-trip zftl"
guest_build() {
    echo "$TAG: building zns-conformance, zns-ftl-crash, zns-nameless-crash, nbd-round-trip and zftl (static)"
    (
        cd "$REPO"
        RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -q \
            -p zftl-zns --features zftl-zns/conformance --bin zns-conformance --bin zns-ftl-crash --bin zns-nameless-crash \
            -p zftl-nbd --bin nbd-round-trip -p zftl-cli --bin zftl --target x86_64-unknown-linux-gnu
    ) || die "cargo build of the guest binaries failed"
    BINDIR=${CARGO_TARGET_DIR:-$REPO/target}/x86_64-unknown-linux-gnu/release
    local b
    for b in $GUEST_BINS; do
        [ -x "$BINDIR/$b" ] || die "built binary not found at $BINDIR/$b"
    done
}

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

# guest_initramfs: $WORK/initramfs.cpio.gz: static busybox as /init's
# shell, GUEST_PROGRAMS with their libraries, the kernel modules the init
# loads (NVMe; ext4 and nbd), scripts/guest/init and the static binaries.
guest_initramfs() {
    local root=$WORK/root applet p m ko b
    mkdir -p "$root"/{bin,dev,proc,sys,lib/modules}
    cp "$BUSYBOX" "$root/bin/busybox"
    for applet in sh mount umount insmod sleep cat dd printf echo ls grep poweroff ifconfig wc \
        mkdir cp rm sync kill find sort xargs sha256sum seq head tee dmesg tail ps fsfreeze date touch diff; do
        ln -s busybox "$root/bin/$applet"
    done
    for p in $GUEST_PROGRAMS; do add_program "$root" "$p"; done
    for m in crct10dif_common crc-t10dif crc64 crc64-rocksoft t10-pi nvme-core nvme \
        crc16 mbcache jbd2 crc32c_generic ext4 nbd; do
        ko=$(find "$MODDIR" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" \) | head -n 1)
        [ -n "$ko" ] || die "module $m not found under $MODDIR"
        case "$ko" in
            *.xz) xz -dc "$ko" >"$root/lib/modules/$m.ko" ;;
            *.zst) zstd -qdc "$ko" >"$root/lib/modules/$m.ko" ;;
            *) cp "$ko" "$root/lib/modules/$m.ko" ;;
        esac
    done
    cp "$GUEST_DIR/init" "$root/init"
    chmod +x "$root/init"
    for b in $GUEST_BINS; do cp "$BINDIR/$b" "$root/bin/"; done
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initramfs.cpio.gz"
}

# guest_qemu LOG SMP MEMORY APPEND [QEMU-ARGS...]: boot the guest kernel on
# ${INITRD:-$WORK/initramfs.cpio.gz} with APPEND added to its command
# line, its console on stdout and in LOG; QEMU's exit status in BOOT_RC.
guest_qemu() {
    local log=$1 smp=$2 mem=$3 append=$4
    shift 4
    set +e
    timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu "${GUEST_CPU:-qemu64}" -m "$mem" -smp "$smp" \
        -display none -nodefaults -serial stdio -no-reboot \
        -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
        -kernel "$KERNEL" -initrd "${INITRD:-$WORK/initramfs.cpio.gz}" \
        -append "console=ttyS0 panic=-1 rdinit=/init quiet clocksource=tsc tsc=reliable zftl.watchdog=$WATCHDOG $append" \
        "$@" </dev/null 2>&1 | tee "$log"
    BOOT_RC=${PIPESTATUS[0]}
    set -e
}

# wanted NAME: whether the run NAME is to boot (ONLY).
wanted() {
    [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]
}

# QEMU's exit status when the guest's watchdog reports a hung run (status 5).
HUNG=$(((5 << 1) | 1))
HUNG_ONCE=()
RUNS_PASSED=0 RUNS_FAILED=0 RUNS_SKIPPED=0

# run NAME ARGS...: `boot NAME ARGS...`, once more if the guest hung
# (QEMU 7.2's NVMe controller can stall for good, docs/zns.md; the hung
# boot's stacks stay in the output, and HUNG_ONCE names the run);
# returns 0 only if the guest reported exit status 0. Counts the run in
# RUNS_PASSED, RUNS_FAILED or (not in ONLY) RUNS_SKIPPED.
run() {
    local name=$1 start
    if ! wanted "$name"; then
        echo "$TAG: $name: SKIPPED (not in $ONLY_VAR=$ONLY)"
        RUNS_SKIPPED=$((RUNS_SKIPPED + 1))
        return 0
    fi
    start=$(date +%s)
    boot "$@"
    if [ "$BOOT_RC" -eq "$HUNG" ]; then
        echo "$TAG: $name: the guest hung (stacks above); booting it once more"
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

# outcome NAME RC SECONDS: say what QEMU's exit status RC means; 0 for a pass.
outcome() {
    local name=$1 rc=$2 secs=$3
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "$TAG: $name: FAIL: the guest did not finish within ${TIMEOUT}s (${secs}s)"
        return 1
    elif [ "$rc" -eq 0 ]; then
        echo "$TAG: $name: FAIL: the guest never reported (plain poweroff, panic or crash) (${secs}s)"
        return 1
    elif [ "$rc" -eq "$HUNG" ]; then
        echo "$TAG: $name: FAIL: hung: the guest's watchdog fired after ${WATCHDOG}s (blocked tasks above) (${secs}s)"
        return 1
    elif [ $((rc & 1)) -eq 1 ] && [ $((rc >> 1)) -eq 0 ]; then
        echo "$TAG: $name: PASS (${secs}s)"
        return 0
    elif [ $((rc & 1)) -eq 1 ]; then
        echo "$TAG: $name: FAIL: the guest reported exit status $((rc >> 1)) (${secs}s)"
        return 1
    else
        echo "$TAG: $name: FAIL: qemu exited with $rc (${secs}s)"
        return 1
    fi
}

# guest_summary: the closing lines (counted by .ci/run); exits 1 naming
# the failed runs in FAILED_RUNS.
guest_summary() {
    echo "$TAG: summary: $RUNS_PASSED passed, $RUNS_FAILED failed, $RUNS_SKIPPED skipped"
    if [ ${#HUNG_ONCE[@]} -gt 0 ]; then
        echo "$TAG: NOTE: hung once and booted again: ${HUNG_ONCE[*]} (the hung boot's stacks are in the log)"
    fi
    if [ ${#FAILED_RUNS[@]} -gt 0 ]; then
        die "failed runs: ${FAILED_RUNS[*]}"
    fi
    if [ -n "${ONLY:-}" ]; then
        echo "$TAG: the runs in $ONLY_VAR=$ONLY passed; the others were SKIPPED"
    else
        echo "$TAG: all required runs passed"
    fi
}
