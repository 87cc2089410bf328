#!/usr/bin/env bash
# A real file system on `zftl serve`, set up as a user would: nbdfuse
# exposes the export as a file, `mkfs.ext4` formats that file and `mount -o
# loop` mounts it, with no other step (the kernel's 512-byte requests reach
# the server as they are: it reads, modifies and writes back the 4 KiB
# blocks they cover in part). A tree of files is written, checked with
# e2fsck and sha256sum across a clean server restart (SIGTERM) and across a
# `kill -9` of the server right after a `sync` (what the FLUSH under that
# sync acknowledged must survive). Between the two, a snapshot: the file
# system frozen (fsfreeze) and `zftl snapshot create --server` on the
# control socket, then while a writer keeps changing the live file system
# the read-only export `zftl@SNAPSHOT` is attached with a second nbdfuse,
# e2fsck -fn must find it clean and, mounted `-o ro,noload`, it must hold
# every file as it was at the snapshot and none written after. Then the
# same kill -9 on ext4 with 1 KiB blocks, where hundreds of the writes are
# read-modify-writes (the server logs them at trace level; both runs count
# them).
#
#   tests/nbd_fs.sh                        # as root (mount, loop, FUSE)
#   ZFTL=path/to/zftl PORT=10998 tests/nbd_fs.sh
#
# Installs libnbd-bin (nbdfuse, nbdinfo), e2fsprogs and fuse3 with apt-get
# when they are missing. Builds target/release/zftl if ZFTL is not given;
# serves on a free port of 127.0.0.1 unless PORT is given (tests/lib.sh).
# The last line is "=== summary: N passed, N failed"; exit status 0 only
# if nothing failed.
set -euo pipefail
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

FUSE_PID=
MNT="$WORK/mnt"
FUSEDIR="$WORK/fuse"
DISK="$FUSEDIR/disk"
SNAP_FUSE_PID=
SNAPMNT="$WORK/snapmnt"
SNAPDIR="$WORK/snapfuse"
WRITER_PID=

# At exit, before the server is killed: the mounts (innermost first),
# then the processes.
cleanup_extra() {
    if [ -n "$WRITER_PID" ]; then
        kill -TERM "$WRITER_PID" 2>/dev/null
        wait "$WRITER_PID" 2>/dev/null
    fi
    fsfreeze -u "$MNT" 2>/dev/null
    local m
    for m in "$SNAPMNT" "$MNT" "$SNAPDIR" "$FUSEDIR"; do
        if mountpoint -q "$m" 2>/dev/null; then
            timeout 30 umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
        fi
    done
    for m in "$SNAP_FUSE_PID" "$FUSE_PID"; do
        if [ -n "$m" ]; then
            kill -TERM "$m" 2>/dev/null
            wait "$m" 2>/dev/null
        fi
    done
}

# ----- tools, from Debian packages --------------------------------------------
[ "$(id -u)" = 0 ] || die "must run as root (mount, loop devices, FUSE)"
need_tools "libnbd-bin e2fsprogs fuse3" \
    nbdfuse nbdinfo mkfs.ext4 e2fsck dumpe2fs sha256sum mountpoint timeout fsfreeze
[ -e /dev/fuse ] || die "/dev/fuse is missing: FUSE is not available on this machine"

mkdir -p "$MNT" "$FUSEDIR" "$SNAPMNT" "$SNAPDIR"
echo "zftl: $ZFTL; work dir: $WORK"

# 1 GiB simulated device (8 channels x 2 LUNs x 64 blocks x 256 pages of 4 KiB).
make_image "$IMAGE" 64

# The phase-1 and phase-4 servers also log each request that covers part
# of a 4 KiB block (a read-modify-write), at trace level: they are counted.
SERVE_LOG=info

# nbdfuse exposes the export as $DISK. It passes the kernel's requests
# through as they come (mkfs.ext4 writes 1 KiB at offset 1 KiB, the loop
# device under the mounted file system 512-byte sectors); the server
# advertises a 512-byte minimum block size and serves them. `mount -o loop`
# turns the file system's cache flushes into fsync of the file, i.e. NBD
# FLUSH. `attach_snapshot NAME` exposes the read-only export zftl@NAME as
# $SNAPDIR/disk the same way (nbdfuse -r).
attach() { attach_at "$FUSEDIR" FUSE_PID "$URI"; }
attach_snapshot() { attach_at "$SNAPDIR" SNAP_FUSE_PID "$BASE_URI/zftl@$1" -r; }
attach_at() {
    local dir=$1 pidvar=$2 uri=$3 pid up=0
    shift 3
    nbdfuse "$@" "$dir/disk" "$uri" >>"$WORK/nbdfuse.log" 2>&1 &
    pid=$!
    printf -v "$pidvar" %s "$pid"
    for _ in $(seq 1 300); do
        if [ -e "$dir/disk" ]; then up=1; break; fi
        kill -0 "$pid" 2>/dev/null || { printf -v "$pidvar" %s ""; cat "$WORK/nbdfuse.log"; die "nbdfuse $uri exited"; }
        sleep 0.1
    done
    [ "$up" = 1 ] || die "nbdfuse did not expose $dir/disk"
}

# Unmount the FUSE directory (nbdfuse then disconnects and exits).
detach() { detach_at "$FUSEDIR" FUSE_PID; }
detach_at() {
    local dir=$1 pidvar=$2 pid=${!2}
    if mountpoint -q "$dir"; then
        timeout 60 umount "$dir" || umount -l "$dir"
    fi
    if [ -n "$pid" ]; then
        timeout 30 tail --pid="$pid" -f /dev/null || kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        printf -v "$pidvar" %s ""
    fi
}

# The loop device mount sets up is freed again by umount (autoclear).
mount_fs() { mount -t ext4 -o loop "$DISK" "$MNT"; }
umount_fs() { timeout 120 umount "$MNT"; }

# COUNT files of random sizes (512 B .. 128 KiB) plus a few of 1-2 MiB in
# directories under $MNT/$1.
write_tree() {
    local top="$MNT/$1" count=$2 i d size
    mkdir -p "$top"
    for i in $(seq 1 "$count"); do
        d="$top/d$((i % 12))/sub$((i % 3))"
        mkdir -p "$d"
        size=$((512 + (RANDOM * 32768 + RANDOM) % (128 * 1024)))
        head -c "$size" /dev/urandom >"$d/f$i.bin"
    done
    for i in 1 2 3 4; do
        head -c $(((1 + i % 2) << 20)) /dev/urandom >"$top/big$i.bin"
    done
}

# sha256sum of every file under $MNT/$1, paths relative to $MNT;
# check_sums FILE [DIR]: the files listed in FILE under DIR (default $MNT).
sums() { (cd "$MNT" && find "$1" -type f -print0 | sort -z | xargs -0 sha256sum); }
check_sums() { (cd "${2:-$MNT}" && sha256sum --quiet -c "$1"); }

# fsck_clean [DISK]: e2fsck -fn of DISK (default $DISK) finds nothing: exit
# status 0, and no question declined and no journal left unreplayed (e2fsck
# exits 0 with "Free blocks count wrong ... Fix? no" as well).
fsck_clean() {
    local out rc=0
    out=$(e2fsck -fn "${1:-$DISK}" 2>&1) || rc=$?
    if [ "$rc" != 0 ] || echo "$out" | grep -qE "Fix\? no|skipping journal recovery"; then
        echo "$out" | tail -n 30
        echo "e2fsck -fn exit status $rc"
        return 1
    fi
    echo "$out" | tail -n 1
}

# ----- phase 1: mkfs, a tree of files, clean unmount, fsck ---------------------
say "phase 1: zftl serve, nbdfuse, mkfs.ext4 on the file, mount -o loop, write a tree"
SERVE_LOG=info,zftl_nbd::transmission=trace
start_server
SERVE_LOG=info
echo "export size: $(nbdinfo --size "$URI") bytes"
attach
if mkfs.ext4 -q -F "$DISK" 2>&1 | tee "$WORK/mkfs.log" && [ "${PIPESTATUS[0]}" = 0 ]; then
    pass "mkfs.ext4 on the nbdfuse file, no other step"
else
    cat "$WORK/nbdfuse.log"
    die "mkfs.ext4 on the nbdfuse file failed"
fi
mount_fs || die "mount -o loop failed"
write_tree one 300
sums one >"$WORK/sums1"
echo "$(wc -l <"$WORK/sums1") files, $(du -sm "$MNT/one" | cut -f1) MiB"
sync
if check_sums "$WORK/sums1"; then pass "checksums read back while mounted"; else fail "checksums while mounted"; fi
if umount_fs; then pass "unmount"; else die "umount failed"; fi
if fsck_clean; then pass "e2fsck -fn clean after the first unmount"; else fail "e2fsck -fn after the first unmount"; fi
detach
rmw=$(grep -c "read-modify-write" "$WORK/serve.try.log" || true)
if [ "$rmw" -gt 0 ]; then
    pass "$rmw requests covered part of a 4 KiB block (read-modify-writes), e.g.:"
    grep -m 3 "read-modify-write" "$WORK/serve.try.log" | sed 's/^.*read-modify-write/  /'
else
    fail "no request covered part of a 4 KiB block: the 512-byte path was not exercised"
fi

# ----- phase 2: SIGTERM, restart, remount, checksums --------------------------
say "phase 2: SIGTERM the server, restart, remount, checksums"
if stop_server; then pass "zftl serve exits 0 on SIGTERM"; else fail "zftl serve exit status on SIGTERM"; fi
start_server
attach
if fsck_clean; then pass "e2fsck -fn clean after a clean restart"; else fail "e2fsck -fn after a clean restart"; fi
mount_fs || die "mount after a clean restart failed"
if check_sums "$WORK/sums1"; then pass "all $(wc -l <"$WORK/sums1") checksums match after a clean restart"; else fail "checksums after a clean restart"; fi
umount_fs || die "umount failed"
detach

# ----- phase 2b: a snapshot export while the live file system changes ---------
say "phase 2b: write, sync, fsfreeze, zftl snapshot create; attach zftl@snap1 while writing"
attach
mount_fs || die "mount failed"
write_tree snap 150
sums one >"$WORK/sums-snap"
sums snap >>"$WORK/sums-snap"
sync
# The freeze writes the journal's contents home and marks the file system
# clean, so the snapshot needs no journal replay (what LVM does around
# its snapshots); without it a snapshot after `sync` is crash-consistent
# only, e2fsck -fn cannot replay its journal on a read-only export.
fsfreeze -f "$MNT" || die "fsfreeze -f failed"
if "$ZFTL" snapshot create snap1 --server "$CTL" >/dev/null; then
    pass "zftl snapshot create snap1 --server on the frozen file system"
else
    fail "zftl snapshot create --server"
fi
fsfreeze -u "$MNT" || die "fsfreeze -u failed"
# The live file system keeps changing: snapshot files deleted and
# overwritten, new files written and removed, synced now and then, until
# $WORK/stop appears (the writer's last file closed before the unmount).
rm -rf "$MNT/snap/d1"
head -c 65536 /dev/urandom >"$MNT/snap/big1.bin"
mkdir -p "$MNT/after"
echo "written after the snapshot" >"$MNT/after/marker"
(
    i=0
    while [ ! -e "$WORK/stop" ]; do
        i=$((i + 1))
        head -c $((4096 + RANDOM * 8)) /dev/urandom >"$MNT/after/w$i.bin"
        rm -f "$MNT/after/w$((i - 8)).bin"
        if [ $((i % 16)) = 0 ]; then sync; fi
    done
    echo "$i" >"$WORK/writer.count"
) &
WRITER_PID=$!
attach_snapshot snap1
if fsck_clean "$SNAPDIR/disk"; then pass "e2fsck -fn clean on zftl@snap1 while the live volume changes"; else fail "e2fsck -fn on zftl@snap1"; fi
if mount -t ext4 -o loop,ro,noload "$SNAPDIR/disk" "$SNAPMNT"; then
    pass "mount -o ro,noload of zftl@snap1"
    if check_sums "$WORK/sums-snap" "$SNAPMNT"; then
        pass "all $(wc -l <"$WORK/sums-snap") files of zftl@snap1 match the checksums at the snapshot"
    else
        fail "checksums of zftl@snap1"
    fi
    if [ ! -e "$SNAPMNT/after" ]; then pass "what was written after the snapshot is absent from it"; else fail "zftl@snap1 holds $SNAPMNT/after"; fi
    timeout 60 umount "$SNAPMNT" || fail "umount of zftl@snap1"
else
    fail "mount -o ro,noload of zftl@snap1"
fi
detach_at "$SNAPDIR" SNAP_FUSE_PID
touch "$WORK/stop"
wait "$WRITER_PID" || fail "the writer on the live file system failed"
WRITER_PID=
echo "the writer wrote $(cat "$WORK/writer.count") files meanwhile"
if umount_fs; then pass "unmount of the live file system"; else die "umount failed"; fi
if fsck_clean; then pass "e2fsck -fn clean on the live volume after the writer"; else fail "e2fsck -fn on the live volume"; fi
detach
"$ZFTL" snapshot delete snap1 --server "$CTL" >/dev/null || fail "zftl snapshot delete snap1 --server"

# ----- phase 3: write more, sync, kill -9 at once, restart ---------------------
say "phase 3: remount, write more, sync, kill -9 the server"
attach
mount_fs || die "mount failed"
write_tree two 200
sums two >"$WORK/sums2"
# Delete and overwrite some phase-1 files too, so the journal carries metadata.
rm -rf "$MNT/one/d0"
head -c 65536 /dev/urandom >"$MNT/one/big1.bin"
sums one >"$WORK/sums1b"
sync
kill9_server
echo "sync returned; server killed with SIGKILL"
# The mounts now sit on a dead connection: take them down (their last
# writes fail with EIO and are not part of what was acknowledged).
timeout 60 umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
detach

say "phase 3: restart after kill -9, journal replay, checksums, e2fsck"
start_server
attach
if dumpe2fs -h "$DISK" 2>/dev/null | grep -q needs_recovery; then
    echo "the file system needs journal recovery (as expected after a kill -9 while mounted)"
else
    echo "note: no journal recovery needed"
fi
# The journal was committed by sync but not checkpointed: e2fsck -n cannot
# replay it, so the kernel does (mount), and then e2fsck checks the result.
if mount_fs; then pass "mount after kill -9 (journal replay)"; else die "mount after kill -9 failed"; fi
if check_sums "$WORK/sums1b"; then pass "all $(wc -l <"$WORK/sums1b") phase-1 checksums (after changes) match after kill -9"; else fail "phase-1 checksums after kill -9"; fi
if check_sums "$WORK/sums2"; then pass "all $(wc -l <"$WORK/sums2") files synced before kill -9 match"; else fail "synced files after kill -9"; fi
if [ ! -e "$MNT/one/d0" ]; then pass "a directory removed before the sync stays removed"; else fail "removed directory came back"; fi
if umount_fs; then pass "unmount after kill -9"; else die "umount failed"; fi
if fsck_clean; then pass "e2fsck -fn clean after kill -9 and journal replay"; else fail "e2fsck -fn after kill -9"; fi
detach
if stop_server; then pass "zftl serve exits 0 on SIGTERM after the crash restart"; else fail "final SIGTERM"; fi

# ----- phase 4: ext4 with 1 KiB blocks: most writes are read-modify-writes ----
# Its metadata and data go out in 1 KiB pieces, each covering part of a 4 KiB
# block of the export: a kill -9 right after `sync` must still leave every
# synced file and a clean file system.
say "phase 4: mkfs.ext4 -b 1024 on the file, write, sync, kill -9, restart"
SERVE_LOG=info,zftl_nbd::transmission=trace
start_server
SERVE_LOG=info
attach
if mkfs.ext4 -q -F -b 1024 "$DISK"; then pass "mkfs.ext4 -b 1024 on the nbdfuse file"; else die "mkfs.ext4 -b 1024 failed"; fi
mount_fs || die "mount (1 KiB blocks) failed"
write_tree three 150
sums three >"$WORK/sums3"
rm -f "$MNT/three/big2.bin"
head -c 100000 /dev/urandom >"$MNT/three/big3.bin"
sums three >"$WORK/sums3"
sync
kill9_server
echo "sync returned; server killed with SIGKILL"
rmw=$(grep -c "read-modify-write" "$WORK/serve.try.log" || true)
if [ "$rmw" -gt 100 ]; then
    pass "$rmw requests before the kill covered part of a 4 KiB block"
else
    fail "only $rmw requests covered part of a 4 KiB block with 1 KiB file system blocks"
fi
timeout 60 umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
detach
start_server
attach
if mount_fs; then pass "mount after kill -9 (1 KiB blocks, journal replay)"; else die "mount after kill -9 (1 KiB blocks) failed"; fi
if check_sums "$WORK/sums3"; then
    pass "all $(wc -l <"$WORK/sums3") files synced before kill -9 match (1 KiB blocks)"
else
    fail "synced files after kill -9 (1 KiB blocks)"
fi
if umount_fs; then pass "unmount (1 KiB blocks)"; else die "umount failed"; fi
if fsck_clean; then pass "e2fsck -fn clean after kill -9 (1 KiB blocks)"; else fail "e2fsck -fn after kill -9 (1 KiB blocks)"; fi
detach
if stop_server; then pass "zftl serve exits 0 on SIGTERM at the end"; else fail "final SIGTERM"; fi
finish
