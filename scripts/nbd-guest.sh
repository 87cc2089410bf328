#!/usr/bin/env bash
# The kernel's NBD client on a snapshot export, in a QEMU guest (software
# CPU; run nbd-snapshot of scripts/guest/init): `zftl serve` on a
# simulated device image in the guest, nbd-client attaches the export
# zftl as /dev/nbd0, mkfs.ext4, mount, a tree of files written and
# synced; the file system frozen (fsfreeze) while `zftl snapshot create
# --server` runs on the control socket. Then, while a writer keeps
# writing, deleting and syncing on the live file system, nbd-client
# attaches the read-only export zftl@snap1 as /dev/nbd1: it must be
# read-only, listed by `nbd-client -l`, clean under e2fsck -fn, and,
# mounted `-o ro,noload`, hold every file with the checksum it had at the
# snapshot and nothing written after. Last the live file system is
# checked clean, the snapshot deleted and the image checked with
# `zftl check`.
#
#   sudo bash scripts/nbd-guest.sh
#
# The harness (packages, kernel, static binaries, initramfs, QEMU boot) is
# scripts/guest/lib.sh, shared with scripts/zns-guest.sh. Must run as
# root: it installs Debian packages (QEMU, a guest kernel, busybox,
# nbd-client, e2fsprogs) with apt-get. A failure inside the guest, a guest
# that never reports or a missing prerequisite fails the script with a
# FAIL line saying which; the last line but one is "nbd-guest: summary: N
# passed, N failed, N skipped".
#
# Environment: NBD_GUEST_TIMEOUT (seconds per guest boot, default 600),
# NBD_GUEST_WATCHDOG (seconds before the guest itself reports a hung run
# with the blocked tasks' stacks, default 300), NBD_GUEST_SKIP_INSTALL=1
# (skip apt-get), NBD_GUEST_KEEP=1 (keep the work directory),
# CARGO_TARGET_DIR (as for cargo).
set -euo pipefail

TAG=nbd-guest
TIMEOUT=${NBD_GUEST_TIMEOUT:-600}
WATCHDOG=${NBD_GUEST_WATCHDOG:-300}
ONLY=
ONLY_VAR=
# shellcheck source=guest/lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/guest/lib.sh"

guest_prepare "${NBD_GUEST_SKIP_INSTALL:-0}"
guest_build

WORK=$(mktemp -d "${TMPDIR:-/tmp}/nbd-guest.XXXXXX")
if [ "${NBD_GUEST_KEEP:-0}" != 1 ]; then
    trap 'rm -rf "$WORK"' EXIT
else
    echo "nbd-guest: work directory $WORK"
fi
guest_initramfs

# boot NAME WHAT: one guest boot, no disk (the image lives in the guest's
# RAM), running WHAT (zftl.run=); QEMU's exit status in BOOT_RC.
boot() {
    echo "nbd-guest: === $1"
    guest_qemu "$WORK/$1.log" 1 1536 "zftl.run=$2"
}

FAILED_RUNS=()
run nbd-snapshot nbd-snapshot || FAILED_RUNS+=(nbd-snapshot)
guest_summary
