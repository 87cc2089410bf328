#!/usr/bin/env bash
# Real NBD clients against `zftl serve`: nbdinfo, nbdcopy, qemu-io and fio's
# nbd engine (verify=crc32c, 4 KiB and 512-byte writes: the server reads,
# modifies and writes back the 4 KiB blocks a 512-byte write covers in
# part), hole reporting (nbdinfo --map, qemu-img map), then a SIGTERM
# (drain, flush, checkpoint) and a restart that must still hold the data;
# last, on an image with tags in band, a snapshot taken through the control
# socket and read back with nbdcopy from its read-only view zftl@NAME, and
# the blocks written since a snapshot listed by
# `nbdinfo --map=x-zftl:changed:NAME` (the incremental-backup list) and by
# qemu-img map through qemu's x-dirty-bitmap.
#
#   tests/nbd_clients.sh            # as root: installs the clients with apt-get
#   ZFTL=path/to/zftl PORT=10999 tests/nbd_clients.sh
#
# Builds target/release/zftl if ZFTL is not given; serves on a free port
# of 127.0.0.1 unless PORT is given (tests/lib.sh). Each step prints PASS
# or FAIL, the last line "=== summary: N passed, N failed"; exit status 0
# only if every step passed.
set -uo pipefail
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

need_tools "libnbd-bin qemu-utils fio nbdkit" nbdinfo nbdcopy qemu-io fio nbdkit
# 512 MiB device.
make_image "$IMAGE" 32

start_server
SIZE=$(nbdinfo --size "$URI")
echo "export size: $SIZE bytes"

# ----- nbdinfo ---------------------------------------------------------------
say "nbdinfo"
nbdinfo "$URI" | tee "$WORK/info.txt"
ok=1
for want in "can_flush: true" "can_fua: true" "can_trim: true" "can_zero: true" \
    "can_fast_zero: true" "can_multi_conn: true" "is_read_only: false" \
    "block_size_minimum: 512" "block_size_preferred: 4096" "export-size: $SIZE"; do
    grep -q "$want" "$WORK/info.txt" || { echo "missing: $want"; ok=0; }
done
[ "$ok" = 1 ] && pass "nbdinfo shows the negotiated features" || fail "nbdinfo features"
if nbdinfo --list "$BASE_URI" | tee "$WORK/list.txt" | grep -q 'export="zftl"'; then
    pass "nbdinfo --list lists the zftl export"
else
    fail "nbdinfo --list"
fi

# ----- nbdcopy round trip ----------------------------------------------------
say "nbdcopy round trip (64 MiB of random data, multi-conn)"
head -c $((64 << 20)) /dev/urandom >"$WORK/in.bin"
if nbdcopy "$WORK/in.bin" "$URI" && nbdcopy "$URI" "$WORK/out.bin" \
    && cmp -n $((64 << 20)) "$WORK/in.bin" "$WORK/out.bin" \
    && cmp -n $((SIZE - (64 << 20))) -i $((64 << 20)):0 "$WORK/out.bin" /dev/zero; then
    pass "nbdcopy in and out: data matches, the rest reads as zeros"
else
    fail "nbdcopy round trip"
fi

# ----- qemu-io patterns ------------------------------------------------------
say "qemu-io patterns"
# qio ARGS...: qemu-io on the export as it is served now.
qio() { qemu-io -f raw "$URI" "$@"; }
qemu_io_ok "qemu-io writes, reads, zeroes and discards patterns" "$URI" \
    -c "write -P 0xab 100M 1M" -c "read -P 0xab 100M 1M" \
    -c "write -P 0xcd -f 101M 64k" -c "read -P 0xcd 101M 64k" \
    -c "write -z 100M 256k" -c "read -P 0 100M 256k" -c "read -P 0xab 105119744 768k" \
    -c "discard 102M 1M" -c "read -P 0 102M 1M" -c "flush" \
    -c "aio_write -P 0x11 110M 64k" -c "aio_write -P 0x22 111M 64k" -c "aio_flush" \
    -c "read -P 0x11 110M 64k" -c "read -P 0x22 111M 64k"
# qemu aligns a 4097-byte read to the advertised 512-byte minimum block
# size itself; the server's own EINVAL for requests not aligned to 512 is
# covered by the Rust tests (crates/nbd-frontend/tests/nbd_sectors.rs).
if qio -c "read 0 4097" 2>&1 | grep -q "read 4097/4097 bytes"; then
    pass "qemu-io: an unaligned 4097-byte read works (qemu aligns it to the advertised block size)"
else
    fail "qemu-io unaligned read"
fi
# 512-byte sectors inside and across 4 KiB blocks, their neighbours intact.
S=$((112 << 20))
qemu_io_ok "qemu-io: 512-byte writes, zeroes and discards inside and across 4 KiB blocks" "$URI" \
    -c "write -P 0x61 $S 16k" -c "write -P 0x62 $((S + 512)) 512" \
    -c "write -P 0x63 $((S + 3584)) 1024" -c "write -z $((S + 8192 + 1536)) 512" \
    -c "discard $((S + 12288 + 512)) 3072" -c "flush" \
    -c "read -P 0x61 $S 512" -c "read -P 0x62 $((S + 512)) 512" \
    -c "read -P 0x61 $((S + 1024)) 2560" -c "read -P 0x63 $((S + 3584)) 1024" \
    -c "read -P 0x61 $((S + 4608)) 5120" -c "read -P 0 $((S + 9728)) 512" \
    -c "read -P 0x61 $((S + 10240)) 2560" -c "read -P 0 $((S + 12800)) 3072" \
    -c "read -P 0x61 $((S + 15872)) 512"

# ----- fio nbd engine, verify=crc32c ------------------------------------------
say "fio nbd engine"
fio_job() {
    local name=$1; shift
    # fio writes its verify state files into the current directory.
    if (cd "$WORK" && fio --name="$name" --ioengine=nbd --uri="$URI" --size=128M --offset=256M \
        --verify=crc32c --do_verify=1 --verify_fatal=1 --output="$WORK/fio-$name.txt" "$@"); then
        grep -E "IOPS=|err=" "$WORK/fio-$name.txt" | head -3
        if grep -q "err= 0" "$WORK/fio-$name.txt"; then pass "fio $name"; else fail "fio $name"; fi
    else
        cat "$WORK/fio-$name.txt"
        fail "fio $name"
    fi
}
fio_job randwrite-4k --rw=randwrite --bs=4k --iodepth=16
fio_job seqwrite-128k --rw=write --bs=128k --iodepth=8
fio_job randrw-4k --rw=randrw --bs=4k --iodepth=16 --verify_backlog=256 --runtime=20 --time_based=0
# 512-byte random writes: 4 jobs of 16 in flight, each on its own 1 MiB, so
# requests in flight often share a 4 KiB block. On a simulated image the
# server runs each request to its end before it reads the next, so these
# check what read-modify-writes leave in a block, not their races; the
# races (the FTL on a driver thread, as on a ZNS drive) are
# crates/nbd-frontend/tests/nbd_sectors.rs's.
fio_job randwrite-512 --rw=randwrite --bs=512 --iodepth=16 --numjobs=4 --size=1M \
    --offset=384M --offset_increment=1M --group_reporting
# 8 jobs, job k writing sector k of every block of 4 MiB (512 bytes, then a
# 3584-byte skip), 8 in flight each: every block is read-modified-written by
# all 8, and each job's sectors must survive the others'.
fio_job interleaved-512 --rw=write:3584 --bs=512 --iodepth=8 --numjobs=8 --size=4M \
    --offset=392M --offset_increment=512 --group_reporting

# ----- block status: holes -----------------------------------------------------
say "block status (base:allocation): holes after discard"
# 120M..124M written, then 121M..122M discarded; in 123M..124M, 64k zeroed
# without unmap (qemu sends NO_HOLE: written as data) and 64k at 123.5M
# zeroed with unmap (a hole).
Z_DATA=$((123 << 20)) Z_HOLE=$(((123 << 20) + (512 << 10)))
qemu_io_ok "qemu-io writes, discards and zeroes 120M..124M" "$URI" \
    -c "write -P 0x5a 120M 4M" -c "discard 121M 1M" \
    -c "write -z $Z_DATA 64k" -c "write -z -u $Z_HOLE 64k" \
    -c "read -P 0 121M 1M" -c "read -P 0x5a 122M 1M" -c "read -P 0 $Z_HOLE 64k"
# covered FILE START END TYPE: lines "offset length type description" of
# type TYPE cover [START, END) (nbdinfo --map lists extents in order).
covered() {
    awk -v s="$2" -v e="$3" -v t="$4" \
        '$3 == t && $1 <= s && $1 + $2 > s { s = $1 + $2 } END { exit !(s >= e) }' "$1"
}
nbdinfo --map "$URI" >"$WORK/map.txt" 2>&1
cat "$WORK/map.txt"
ok=1
M=$((1 << 20))
# want START END TYPE WHAT
want() { covered "$WORK/map.txt" "$1" "$2" "$3" || { echo "not type $3: $4 [$1, $2)"; ok=0; }; }
want 0 $((64 * M)) 0 "nbdcopy's data"
want $((64 * M)) $((100 * M)) 3 "never written"
want $((120 * M)) $((121 * M)) 0 "written"
want $((121 * M)) $((122 * M)) 3 "discarded"
want $((122 * M)) "$Z_HOLE" 0 "written, zeroed with NO_HOLE"
want "$Z_HOLE" $((Z_HOLE + (64 << 10))) 3 "zeroed with unmap"
want $((Z_HOLE + (64 << 10))) $((124 * M)) 0 "written"
want $((124 * M)) $((256 * M)) 3 "never written"
want $((256 * M)) $((256 * M + 4096)) 0 "fio's data"
[ "$ok" = 1 ] && pass "nbdinfo --map shows the holes (3 hole,zero) and the data (0)" \
    || fail "nbdinfo --map holes"
# qemu's client asks with NBD_CMD_FLAG_REQ_ONE, one extent per request.
if qemu-img map -f raw --output=json "$URI" >"$WORK/qmap.txt" 2>&1 \
    && grep -q "\"start\": $((121 * M)), \"length\": $M, .*\"zero\": true, \"data\": false" "$WORK/qmap.txt" \
    && grep -q "\"start\": $((120 * M)), \"length\": $M, .*\"zero\": false, \"data\": true" "$WORK/qmap.txt"; then
    pass "qemu-img map (REQ_ONE) shows the discarded MiB as a zero hole"
else
    cat "$WORK/qmap.txt"
    fail "qemu-img map"
fi

# ----- SIGTERM drains and checkpoints; a restart still has the data ------------
say "SIGTERM, restart, data still there"
if stop_server; then pass "zftl serve exits 0 on SIGTERM"; else fail "zftl serve exit status on SIGTERM"; fi
grep -E "shutting down|checkpoint|clean shutdown" "$WORK/serve.log" | tail -4
start_server
if nbdcopy "$URI" "$WORK/out2.bin" && cmp -n $((64 << 20)) "$WORK/in.bin" "$WORK/out2.bin" \
    && qemu-io -f raw "$URI" -c "read -P 0xab 105119744 768k" -c "read -P 0x22 111M 64k" \
        -c "read -P 0xcd 101M 64k" >"$WORK/qio2.txt" 2>&1 \
    && ! grep -qiE "fail|error|mismatch" "$WORK/qio2.txt"; then
    pass "data survives a clean restart"
else
    fail "data after restart"
fi
stop_server || fail "second SIGTERM"

# ----- snapshot views: zftl@NAME while the server runs -------------------------
say "snapshot views (nbdcopy from zftl@before)"
# Snapshots need tags in band: a second, smaller image formatted so.
IMAGE="$WORK/snap.img"
make_image "$IMAGE" 8 format --tag-placement in-band
start_server
SNAP_BYTES=$((16 << 20))
head -c $SNAP_BYTES /dev/urandom >"$WORK/before.bin"
head -c $SNAP_BYTES /dev/urandom >"$WORK/after.bin"
VIEW="$URI@before"
if nbdcopy "$WORK/before.bin" "$URI" \
    && "$ZFTL" snapshot create before --server "$IMAGE.control" >/dev/null \
    && nbdcopy "$WORK/after.bin" "$URI"; then
    pass "data written, snapshot 'before' taken through the control socket, data overwritten"
else
    fail "write, zftl snapshot create --server, overwrite"
fi
if nbdinfo --list "$BASE_URI" | tee "$WORK/snaplist.txt" | grep -q 'export="zftl@before"'; then
    pass "nbdinfo --list lists the view zftl@before"
else
    cat "$WORK/snaplist.txt"
    fail "nbdinfo --list: no zftl@before"
fi
if nbdinfo "$VIEW" | tee "$WORK/viewinfo.txt" | grep -q "is_read_only: true"; then
    pass "the view is read-only"
else
    cat "$WORK/viewinfo.txt"
    fail "nbdinfo on the view"
fi
if nbdcopy "$VIEW" "$WORK/view.bin" && cmp -n $SNAP_BYTES "$WORK/before.bin" "$WORK/view.bin" \
    && nbdcopy "$URI" "$WORK/live.bin" && cmp -n $SNAP_BYTES "$WORK/after.bin" "$WORK/live.bin"; then
    pass "nbdcopy of zftl@before equals the data before the snapshot; zftl holds the newer data"
else
    fail "nbdcopy of the view"
fi
if nbdcopy "$WORK/after.bin" "$VIEW" 2>"$WORK/viewwrite.txt"; then
    fail "nbdcopy wrote to a snapshot view"
else
    pass "writes to the view are refused ($(head -c 120 "$WORK/viewwrite.txt" | tr '\n' ' '))"
fi
# ----- changed blocks: the meta context x-zftl:changed:NAME ---------------------
say "changed blocks (nbdinfo --map=x-zftl:changed:base)"
# changed_map URI CONTEXT OUT: nbdinfo --map's extents of type 1 (changed)
# as "offset length" lines in OUT; fails if nbdinfo fails or the extents
# do not cover the export.
changed_map() {
    nbdinfo --map="$2" "$1" >"$3.all" 2>&1 || { cat "$3.all"; return 1; }
    awk -v size="$SIZE" '{ if ($1 != at) bad = 1; at = $1 + $2 } $3 == 1 { print $1, $2 }
        END { exit bad || at != size }' "$3.all" >"$3" || { cat "$3.all"; return 1; }
}
SIZE=$(nbdinfo --size "$URI")
CTX=x-zftl:changed:base
M=$((1 << 20))
# After the snapshot 'base': 1 MiB at 2 MiB, 64 KiB at 9 MiB, one 512-byte
# sector at 12 MiB + 512 (its whole 4 KiB block is a new version), 128 KiB
# at 20 MiB (never written before), and 1 MiB at 30 MiB written then
# discarded (never written before either: unchanged).
if "$ZFTL" snapshot create base --server "$IMAGE.control" >/dev/null \
    && qio -c "write -P 0x31 $((2 * M)) 1M" -c "write -P 0x32 $((9 * M)) 64k" \
        -c "write -P 0x33 $((12 * M + 512)) 512" -c "write -P 0x34 $((20 * M)) 128k" \
        -c "write -P 0x35 $((30 * M)) 1M" -c "discard $((30 * M)) 1M" >"$WORK/qio-changed.txt" 2>&1 \
    && ! grep -qiE "fail|error|mismatch" "$WORK/qio-changed.txt"; then
    pass "snapshot 'base' taken through the control socket, then four extents written"
else
    cat "$WORK/qio-changed.txt"
    fail "zftl snapshot create base --server, qemu-io writes"
fi
nbdinfo "$URI" >"$WORK/ctxinfo.txt" 2>&1
sed -n '/contexts:/,/is_rotational/p' "$WORK/ctxinfo.txt"
if grep -qx "[[:space:]]*$CTX" "$WORK/ctxinfo.txt" \
    && grep -qx "[[:space:]]*x-zftl:changed:before" "$WORK/ctxinfo.txt"; then
    pass "nbdinfo lists the contexts x-zftl:changed:before and x-zftl:changed:base"
else
    cat "$WORK/ctxinfo.txt"
    fail "nbdinfo: the changed contexts are not offered"
fi
printf '%s\n' "$((2 * M)) $M" "$((9 * M)) 65536" "$((12 * M)) 4096" "$((20 * M)) 131072" \
    >"$WORK/changed.want"
changed_map "$URI" "$CTX" "$WORK/changed.txt"
cat "$WORK/changed.txt.all"
if diff "$WORK/changed.want" "$WORK/changed.txt"; then
    pass "nbdinfo --map=$CTX lists exactly the extents written since 'base'"
else
    fail "nbdinfo --map=$CTX"
fi
# qemu's client reads any context through x-dirty-bitmap (one extent per
# request, NBD_CMD_FLAG_REQ_ONE), status 1 showing as "data": false.
if qemu-img map --output=json --image-opts \
        "driver=nbd,export=zftl,server.type=inet,server.host=127.0.0.1,server.port=$PORT,x-dirty-bitmap=$CTX" \
        >"$WORK/qmap-changed.txt" 2>&1 \
    && sed -n 's/.*"start": \([0-9]*\), "length": \([0-9]*\),.*"data": false.*/\1 \2/p' \
        "$WORK/qmap-changed.txt" | diff "$WORK/changed.want" -; then
    pass "qemu-img map with x-dirty-bitmap=$CTX (REQ_ONE) finds the same extents"
else
    cat "$WORK/qmap-changed.txt"
    fail "qemu-img map x-dirty-bitmap=$CTX"
fi
# On the view zftl@before the context compares 'base' with 'before': the
# 16 MiB nbdcopy rewrote between them, nothing of the writes after 'base'.
if changed_map "$VIEW" "$CTX" "$WORK/changed-view.txt" \
    && [ "$(cat "$WORK/changed-view.txt")" = "0 $SNAP_BYTES" ]; then
    pass "nbdinfo --map=$CTX on zftl@before lists the 16 MiB rewritten between the snapshots"
else
    cat "$WORK/changed-view.txt"
    fail "nbdinfo --map=$CTX on the view"
fi
if nbdinfo --map=x-zftl:changed:nope "$URI" >"$WORK/nope.txt" 2>&1; then
    fail "nbdinfo --map of a snapshot that does not exist succeeded"
else
    pass "a context of an unknown snapshot is not offered ($(head -c 120 "$WORK/nope.txt" | tr '\n' ' '))"
fi
if "$ZFTL" snapshot delete base --server "$IMAGE.control" >/dev/null \
    && ! nbdinfo --map="$CTX" "$URI" >"$WORK/ctxgone.txt" 2>&1; then
    pass "after zftl snapshot delete base its context is gone"
else
    cat "$WORK/ctxgone.txt"
    fail "the context after the delete"
fi

if "$ZFTL" snapshot delete before --server "$IMAGE.control" >/dev/null \
    && ! nbdinfo "$VIEW" >"$WORK/gone.txt" 2>&1 \
    && ! nbdinfo --list "$BASE_URI" | grep -q 'zftl@before'; then
    pass "after zftl snapshot delete the view is gone ($(head -c 120 "$WORK/gone.txt" | tr '\n' ' '))"
else
    cat "$WORK/gone.txt"
    fail "the view after the delete"
fi
stop_server || fail "SIGTERM (snapshot image)"

finish
