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
# Builds target/release/zftl if ZFTL is not given. Exit status 0 only if
# every step passed; each step prints PASS or FAIL.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PORT=${PORT:-10919}
URI="nbd://127.0.0.1:$PORT/zftl"
FAILED=0
PASSED=0

say() { printf '\n=== %s\n' "$*"; }
pass() { echo "PASS: $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
die() { echo "range_cli.sh: $*" >&2; exit 2; }

# ----- the clients, from Debian packages -------------------------------------
need=(nbdinfo nbdcopy qemu-io)
missing=0
for t in "${need[@]}"; do command -v "$t" >/dev/null || missing=1; done
if [ "$missing" = 1 ]; then
    [ "$(id -u)" = 0 ] || die "nbdcopy/nbdinfo/qemu-io are missing and installing them needs root"
    say "installing libnbd-bin qemu-utils"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq libnbd-bin qemu-utils >/dev/null \
        || die "apt-get install libnbd-bin qemu-utils failed"
    for t in "${need[@]}"; do command -v "$t" >/dev/null || die "$t still missing after install"; done
fi

if [ -z "${ZFTL:-}" ]; then
    say "building zftl (release)"
    (cd "$ROOT" && cargo build --release -q -p zftl-cli) || die "cargo build failed"
    ZFTL="$ROOT/target/release/zftl"
fi
[ -x "$ZFTL" ] || die "no zftl binary at $ZFTL"

WORK=$(mktemp -d /tmp/zftl-range-cli.XXXXXX)
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill -KILL "$SERVER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

IMAGE="$WORK/dev.img"
CTL="$IMAGE.control"
# 512 MiB device (8 channels x 2 LUNs x 32 blocks x 256 pages of 4 KiB).
"$ZFTL" sim create "$IMAGE" --blocks-per-lun 32 >/dev/null || die "sim create failed"

start_server() {
    "$ZFTL" serve --image "$IMAGE" --listen "127.0.0.1:$PORT" >>"$WORK/serve.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        if nbdinfo --size "$URI" >/dev/null 2>&1 \
            && "$ZFTL" range attrs --server "$CTL" >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/serve.log"; die "server exited"; }
        sleep 0.1
    done
    cat "$WORK/serve.log"
    die "server did not come up on port $PORT with control socket $CTL"
}

stop_server() {
    kill -TERM "$SERVER_PID"
    local rc=0
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=
    return "$rc"
}

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
if qemu-io -f raw "$URI" -c "write -P 0x77 0 1M" -c "flush" >"$WORK/qio.txt" 2>&1 \
    && ! grep -qiE "fail|error" "$WORK/qio.txt"; then
    pass "qemu-io overwrote the source's first MiB"
else
    cat "$WORK/qio.txt"
    fail "qemu-io overwrite"
fi
if "$ZFTL" range delete "$DEL:256" --server "$CTL" >/dev/null; then
    pass "zftl range delete $DEL:256 --server"
else
    fail "zftl range delete --server"
fi
check "live"

say "error case: a clone into an immutable range"
"$ZFTL" range attr immutable "$DST:$BLOCKS" --server "$CTL" >/dev/null || fail "attr immutable"
rc=0
"$ZFTL" range clone "$SRC:$((DST + 10)):1" --server "$CTL" >"$WORK/err.out" 2>"$WORK/err.txt" || rc=$?
cat "$WORK/err.txt"
if [ "$rc" = 1 ] && [ "$(wc -l <"$WORK/err.txt")" = 1 ] && [ ! -s "$WORK/err.out" ] \
    && grep -q "^zftl: error: server $CTL: clone: block $((DST + 10)) is in an immutable range" "$WORK/err.txt"; then
    pass "clone into an immutable range: exit 1, one line naming the block"
else
    fail "clone into an immutable range (exit $rc)"
fi
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
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null
SERVER_PID=
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

say "summary: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
