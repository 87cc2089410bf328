#!/usr/bin/env bash
# Range operations end to end on a running `zftl serve`: data written over
# NBD with nbdcopy, `zftl range clone --server` on the control socket, the
# clone read back over NBD (nbdcopy) byte for byte, a write that breaks the
# sharing on one side only, a delete, then a clean restart and a kill -9 +
# restart that both keep it all; and the error case: a clone into an
# immutable range exits 1 with one line naming it, and NBD writes there
# fail.
#
#   tests/range_cli.sh             # as root: installs the clients with apt-get
#   ZFTL=path/to/zftl PORT=10999 tests/range_cli.sh
#
# Builds target/release/zftl if ZFTL is not given; serves on a free port
# of 127.0.0.1 unless PORT is given (tests/lib.sh). Each step prints PASS
# or FAIL, the last line "=== summary: N passed, N failed"; exit status 0
# only if every step passed.
set -uo pipefail
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

need_tools "libnbd-bin qemu-utils" nbdinfo nbdcopy qemu-io
# 512 MiB device; start_server waits for the control socket too.
make_image "$IMAGE" 32
READY_PROBE=(range attrs)

BS=4096
MIB=$((1 << 20))
DATA_MIB=16
SRC=0                            # blocks 0..4096: nbdcopy's data
DST=$((256 * MIB / BS))          # the clone at 256 MiB
BLOCKS=$((DATA_MIB * MIB / BS))
DEL=$((4 * MIB / BS))            # 4 MiB..5 MiB of the source, deleted

# check WHAT: the export read out with nbdcopy holds everything expected.
check() {
    local what=$1 ok=1
    rm -f "$WORK/out.bin"
    if ! nbdcopy "$URI" "$WORK/out.bin"; then fail "$what: nbdcopy out"; return; fi
    # The clone: the data as first written, whole, though the source
    # changed after the clone.
    cmp -n $((DATA_MIB * MIB)) -i $((DST * BS)):0 "$WORK/out.bin" "$WORK/in.bin" \
        || { echo "the clone differs from the data written"; ok=0; }
    # The source: 0x77 in its first MiB (written after the clone), zeros
    # at 4..5 MiB (deleted), the data elsewhere.
    cmp -n "$MIB" "$WORK/out.bin" "$WORK/p77.bin" || { echo "source MiB 0 is not 0x77"; ok=0; }
    cmp -n $((3 * MIB)) -i "$MIB:$MIB" "$WORK/out.bin" "$WORK/in.bin" \
        || { echo "source MiB 1..4 differ"; ok=0; }
    cmp -n "$MIB" -i $((4 * MIB)):0 "$WORK/out.bin" /dev/zero || { echo "source MiB 4 is not zeros"; ok=0; }
    cmp -n $((11 * MIB)) -i $((5 * MIB)):$((5 * MIB)) "$WORK/out.bin" "$WORK/in.bin" \
        || { echo "source MiB 5..16 differ"; ok=0; }
    [ "$ok" = 1 ] && pass "$what: the clone, the source and the deleted range read back as expected" \
        || fail "$what: data read back over NBD"
}

start_server
[ -S "$CTL" ] && [ "$(stat -c %a "$CTL")" = 600 ] && pass "control socket $CTL exists with mode 0600" \
    || fail "control socket mode: $(stat -c %a "$CTL" 2>&1)"

say "data in with nbdcopy, clone with zftl range --server"
head -c $((DATA_MIB * MIB)) /dev/urandom >"$WORK/in.bin"
head -c "$MIB" /dev/zero | tr '\0' '\167' >"$WORK/p77.bin"
if nbdcopy "$WORK/in.bin" "$URI"; then pass "nbdcopy wrote $DATA_MIB MiB"; else fail "nbdcopy in"; fi
if "$ZFTL" range clone "$SRC:$DST:$BLOCKS" --server "$CTL" --json >"$WORK/clone.json" \
    && grep -q '"op": "clone"' "$WORK/clone.json" && grep -q "\"blocks\": $BLOCKS" "$WORK/clone.json"; then
    pass "zftl range clone $SRC:$DST:$BLOCKS --server"
else
    cat "$WORK/clone.json"
    fail "zftl range clone --server"
fi
# Break the sharing on the source side only, and delete a MiB of it.
qemu_io_ok "qemu-io overwrote the source's first MiB" "$URI" \
    -c "write -P 0x77 0 1M" -c "flush"
if "$ZFTL" range delete "$DEL:256" --server "$CTL" >/dev/null; then
    pass "zftl range delete $DEL:256 --server"
else
    fail "zftl range delete --server"
fi
check "live"

say "error case: a clone into an immutable range"
"$ZFTL" range attr immutable "$DST:$BLOCKS" --server "$CTL" >/dev/null || fail "attr immutable"
refused 1 "clone into an immutable range: exit 1, one line naming the block" \
    "^zftl: error: server $CTL: clone: block $((DST + 10)) is in an immutable range" \
    range clone "$SRC:$((DST + 10)):1" --server "$CTL"
if qemu-io -f raw "$URI" -c "write -P 0x55 $((DST * BS)) 4k" >"$WORK/qio-imm.txt" 2>&1; then :; fi
if grep -qi "Operation not permitted" "$WORK/qio-imm.txt"; then
    pass "an NBD write into the immutable range fails with EPERM"
else
    cat "$WORK/qio-imm.txt"
    fail "NBD write into the immutable range"
fi

say "clean restart"
if stop_server; then pass "zftl serve exits 0 on SIGTERM"; else fail "exit status on SIGTERM"; fi
[ ! -e "$CTL" ] && pass "the control socket is removed at a clean exit" || fail "control socket left after SIGTERM"
start_server
check "after a clean restart"
if "$ZFTL" range attrs --server "$CTL" | grep -q "immutable"; then
    pass "the immutable range is still listed"
else
    fail "attrs after restart"
fi

say "kill -9 and restart"
# One more acknowledged operation since the last checkpoint: a second clone.
"$ZFTL" range clone "$SRC:$((DST + BLOCKS)):256" --server "$CTL" >/dev/null || fail "second clone"
kill9_server
[ -S "$CTL" ] && pass "kill -9 leaves a stale control socket" || fail "no stale socket after kill -9"
start_server
pass "the restart replaced the stale control socket"
check "after kill -9 and a restart"
if cmp -n "$MIB" -i $(((DST + BLOCKS) * BS)):0 "$WORK/out.bin" "$WORK/p77.bin"; then
    pass "the clone acknowledged just before kill -9 survived"
else
    fail "the last clone before kill -9"
fi
stop_server || fail "final SIGTERM"

finish
