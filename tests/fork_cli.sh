#!/usr/bin/env bash
# Writable forks end to end on a running `zftl serve`: data written over
# NBD with nbdcopy, a snapshot taken and the live volume then overwritten
# (qemu-io); `zftl fork create --server` on the control socket makes the
# fork appear in NBD_OPT_LIST (nbdinfo --list) as a writable export under
# its own name; qemu-io writes to it (1 MiB and a 512-byte sector); nbdcopy
# reads it back as the snapshot plus those writes while the snapshot's
# export and the live export read as before; a clean restart keeps the
# fork, its data and its export; `zftl fork delete --server` takes the
# export away and lets the snapshot go; the image is checked clean.
#
#   tests/fork_cli.sh             # as root: installs the clients with apt-get
#   ZFTL=path/to/zftl PORT=10997 tests/fork_cli.sh
#
# Builds target/release/zftl if ZFTL is not given; serves on a free port
# of 127.0.0.1 unless PORT is given (tests/lib.sh). Each step prints PASS
# or FAIL, the last line "=== summary: N passed, N failed"; exit status 0
# only if every step passed.
set -uo pipefail
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

need_tools "libnbd-bin qemu-utils" nbdinfo nbdcopy qemu-io
# 512 MiB device, tags in OOB (the default); start_server waits for the
# control socket too.
make_image "$IMAGE" 32 format
READY_PROBE=(fork list)

MIB=$((1 << 20))
DATA_MIB=16

# reads_as URI FILE WHAT: the first DATA_MIB MiB of URI equal FILE.
reads_as() {
    local uri=$1 want=$2 what=$3
    rm -f "$WORK/out.bin"
    if nbdcopy "$uri" "$WORK/out.bin" \
        && cmp -n $((DATA_MIB * MIB)) "$WORK/out.bin" "$want"; then
        pass "$what"
    else
        fail "$what"
    fi
}

# listed NAME: nbdinfo --list shows export NAME.
listed() {
    nbdinfo --list --json "$BASE_URI" >"$WORK/list.json" 2>"$WORK/list.err" \
        && grep -q "\"export-name\": \"$1\"" "$WORK/list.json"
}

start_server

say "data in with nbdcopy, a snapshot, the live volume overwritten"
head -c $((DATA_MIB * MIB)) /dev/urandom >"$WORK/in.bin"
nbdcopy "$WORK/in.bin" "$URI" && pass "nbdcopy wrote $DATA_MIB MiB" || fail "nbdcopy in"
"$ZFTL" snapshot create base --server "$CTL" >/dev/null && pass "zftl snapshot create base --server" \
    || fail "snapshot create"
qemu_io_ok "qemu-io overwrote the live volume's first MiB" "$URI" \
    -c "write -P 0x77 0 1M" -c "flush"
# What the live volume holds now.
cp "$WORK/in.bin" "$WORK/live.bin"
head -c "$MIB" /dev/zero | tr '\0' '\167' | dd of="$WORK/live.bin" conv=notrunc status=none

say "zftl fork create --server: a writable export appears"
if listed dev; then fail "dev listed before its create"; else pass "no export dev before the create"; fi
if "$ZFTL" fork create base dev --server "$CTL" --json >"$WORK/create.json" \
    && grep -q '"name": "dev"' "$WORK/create.json" && grep -q '"created": "20' "$WORK/create.json"; then
    pass "zftl fork create base dev --server"
else
    cat "$WORK/create.json"
    fail "zftl fork create --server"
fi
if listed dev && grep -q 'writable fork \\"dev\\" of snapshot \\"base\\"' "$WORK/list.json"; then
    pass "nbdinfo --list shows dev, a writable fork of snapshot base"
else
    cat "$WORK/list.json" "$WORK/list.err"
    fail "dev in NBD_OPT_LIST"
fi
if nbdinfo --json "$BASE_URI/dev" >"$WORK/info.json" 2>&1 \
    && grep -q '"is_read_only": false' "$WORK/info.json" \
    && grep -q "\"export-size\": $(nbdinfo --size "$URI")" "$WORK/info.json"; then
    pass "dev is writable and the volume's size"
else
    cat "$WORK/info.json"
    fail "nbdinfo dev"
fi
reads_as "$BASE_URI/dev" "$WORK/in.bin" "the fork reads as the snapshot holds the volume"

say "qemu-io writes to the fork; the snapshot and the live volume do not change"
qemu_io_ok "qemu-io wrote 1 MiB and a 512-byte sector to the fork and read them back" "$BASE_URI/dev" \
    -c "write -P 0x33 2M 1M" -c "write -P 0x44 8389120 512" -c "flush" \
    -c "read -P 0x33 2M 1M" -c "read -P 0x44 8389120 512"
cp "$WORK/in.bin" "$WORK/fork.bin"
head -c "$MIB" /dev/zero | tr '\0' '\063' | dd of="$WORK/fork.bin" bs=1M seek=2 conv=notrunc status=none
head -c 512 /dev/zero | tr '\0' '\104' \
    | dd of="$WORK/fork.bin" bs=512 seek=$((8 * MIB / 512 + 1)) conv=notrunc status=none
reads_as "$BASE_URI/dev" "$WORK/fork.bin" "the fork reads as the snapshot plus its writes"
reads_as "$BASE_URI/zftl@base" "$WORK/in.bin" "the snapshot's export reads as before"
reads_as "$URI" "$WORK/live.bin" "the live export reads as before"
if "$ZFTL" fork list --server "$CTL" >"$WORK/forks.txt" \
    && grep -qE '^ +[0-9]+ +dev +base ' "$WORK/forks.txt"; then
    pass "zftl fork list --server: dev of base"
else
    cat "$WORK/forks.txt"
    fail "fork list"
fi

say "error cases"
refused 1 "a fork of an unknown snapshot: exit 1, one line naming it" \
    "^zftl: error: server $CTL: fork_create: .*no snapshot named \"nope\"" \
    fork create nope x --server "$CTL"
rc=0
"$ZFTL" snapshot delete base --server "$CTL" >/dev/null 2>"$WORK/err.txt" || rc=$?
cat "$WORK/err.txt"
[ "$rc" = 1 ] && pass "the snapshot of a live fork cannot be deleted" || fail "snapshot delete (exit $rc)"

say "a clean restart keeps the fork and its export"
stop_server && pass "zftl serve exits 0 on SIGTERM" || fail "exit status on SIGTERM"
start_server
listed dev && pass "dev listed after the restart" || fail "dev after the restart"
reads_as "$BASE_URI/dev" "$WORK/fork.bin" "after the restart, the fork reads as before"

say "zftl fork delete --server: the export goes"
"$ZFTL" fork delete dev --server "$CTL" >/dev/null && pass "zftl fork delete dev --server" \
    || fail "fork delete"
if listed zftl && ! grep -q '"export-name": "dev"' "$WORK/list.json"; then
    pass "dev is gone from NBD_OPT_LIST"
else
    cat "$WORK/list.json"
    fail "dev still listed"
fi
if nbdinfo "$BASE_URI/dev" >/dev/null 2>&1; then fail "dev still opens"; else pass "dev no longer opens"; fi
"$ZFTL" snapshot delete base --server "$CTL" >/dev/null && pass "then the snapshot may go" \
    || fail "snapshot delete after the fork's"
reads_as "$URI" "$WORK/live.bin" "the live export reads as before"
stop_server || fail "final SIGTERM"
if "$ZFTL" fork list --image "$IMAGE" --json >"$WORK/final.json" \
    && grep -q '"forks": \[\]' "$WORK/final.json"; then
    pass "zftl fork list --image: none"
else
    cat "$WORK/final.json"
    fail "final list"
fi
check_image

finish
