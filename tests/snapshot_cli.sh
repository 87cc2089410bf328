#!/usr/bin/env bash
# Snapshots end to end on a running `zftl serve`: data written over NBD
# with nbdcopy, `zftl snapshot create --server` on the control socket, the
# volume then overwritten (qemu-io) and partly deleted (`zftl range delete
# --server`), the snapshot read back with `zftl snapshot read --server`
# byte for byte as it was while the live volume reads the new data, and
# `zftl snapshot diff --server` listing exactly the blocks changed since;
# then a clean restart and a kill -9 + restart that both keep the
# snapshots and their diffs; then a protection window (`zftl serve
# --protect`) taking points between rounds of NBD writes on the real wall
# clock, `zftl view --at` naming an export that reads a point's data with
# nbdcopy and qemu-io, `zftl revert --to TIME --server` making the volume
# what it held then (and the undo snapshot taking it back), points kept
# across a kill -9; a delete, and the image checked clean afterwards.
#
#   tests/snapshot_cli.sh             # as root: installs the clients with apt-get
#   ZFTL=path/to/zftl PORT=10998 tests/snapshot_cli.sh
#
# Builds target/release/zftl if ZFTL is not given; serves on a free port
# of 127.0.0.1 unless PORT is given (tests/lib.sh). Each step prints PASS
# or FAIL, the last line "=== summary: N passed, N failed"; exit status 0
# only if every step passed.
set -uo pipefail
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"

need_tools "libnbd-bin qemu-utils" nbdinfo nbdcopy qemu-io
# 512 MiB device, tags in OOB (the default); start_server [FLAGS...] waits
# for the control socket too.
make_image "$IMAGE" 32 format
READY_PROBE=(snapshot list)

BS=4096
MIB=$((1 << 20))
DATA_MIB=16
BLOCKS=$((DATA_MIB * MIB / BS))
DEL=$((4 * MIB / BS))            # 4 MiB..5 MiB, deleted after the snapshot

# snap_is NAME FILE WHAT: snapshot NAME's first DATA_MIB MiB equal FILE.
snap_is() {
    local name=$1 want=$2 what=$3
    rm -f "$WORK/snap.bin"
    if "$ZFTL" snapshot read "$name" --lba 0 --blocks "$BLOCKS" --out "$WORK/snap.bin" \
            --server "$CTL" >/dev/null \
        && cmp "$WORK/snap.bin" "$want"; then
        pass "$what: snapshot $name reads back as it was taken"
    else
        fail "$what: snapshot $name"
    fi
}

# diff_is WHAT "LBA:BLOCKS ..." ARGS...: `zftl snapshot diff ARGS --server`
# lists exactly these runs of changed blocks, in its text (rows and the
# closing totals) and in its --json.
diff_is() {
    local what=$1 want=$2 got runs="" n=0 blocks=0 r
    shift 2
    for r in $want; do
        runs="$runs{\"lba\":${r%%:*},\"blocks\":${r##*:}},"
        n=$((n + 1))
        blocks=$((blocks + ${r##*:}))
    done
    runs="\"runs\":[${runs%,}]"
    "$ZFTL" snapshot diff "$@" --server "$CTL" >"$WORK/diff.txt" 2>&1
    got=$(awk 'NF == 4 && $1 ~ /^[0-9]+$/ { printf "%s%s:%s", sep, $1, $2; sep = " " }' "$WORK/diff.txt")
    if [ "$got" = "$want" ] \
        && tail -1 "$WORK/diff.txt" | grep -q "^$n extent(s), $blocks block(s), $((blocks * BS)) bytes" \
        && "$ZFTL" snapshot diff "$@" --server "$CTL" --json | tr -d ' \n' | grep -qF "$runs"; then
        pass "$what: zftl snapshot diff $* lists $want"
    else
        cat "$WORK/diff.txt"
        fail "$what: zftl snapshot diff $* (want $want, got ${got:-nothing})"
    fi
}

# live_is WHAT: the live volume holds 0x77 in MiB 0, zeros in MiB 4, the
# data elsewhere.
live_is() {
    local what=$1 ok=1
    rm -f "$WORK/out.bin"
    if ! nbdcopy "$URI" "$WORK/out.bin"; then fail "$what: nbdcopy out"; return; fi
    cmp -n "$MIB" "$WORK/out.bin" "$WORK/p77.bin" || { echo "MiB 0 is not 0x77"; ok=0; }
    cmp -n $((3 * MIB)) -i "$MIB:$MIB" "$WORK/out.bin" "$WORK/in.bin" || { echo "MiB 1..4 differ"; ok=0; }
    cmp -n "$MIB" -i $((4 * MIB)):0 "$WORK/out.bin" /dev/zero || { echo "MiB 4 is not zeros"; ok=0; }
    cmp -n $((11 * MIB)) -i $((5 * MIB)):$((5 * MIB)) "$WORK/out.bin" "$WORK/in.bin" \
        || { echo "MiB 5..16 differ"; ok=0; }
    [ "$ok" = 1 ] && pass "$what: the live volume reads the new data" || fail "$what: live data"
}

start_server

say "data in with nbdcopy, snapshot with zftl snapshot create --server"
head -c $((DATA_MIB * MIB)) /dev/urandom >"$WORK/in.bin"
head -c "$MIB" /dev/zero | tr '\0' '\167' >"$WORK/p77.bin"
if nbdcopy "$WORK/in.bin" "$URI"; then pass "nbdcopy wrote $DATA_MIB MiB"; else fail "nbdcopy in"; fi
if "$ZFTL" snapshot create first --server "$CTL" --json >"$WORK/create.json" \
    && grep -q '"name": "first"' "$WORK/create.json" && grep -q '"created": "20' "$WORK/create.json"; then
    pass "zftl snapshot create first --server"
else
    cat "$WORK/create.json"
    fail "zftl snapshot create --server"
fi
qemu_io_ok "qemu-io overwrote the first MiB" "$URI" \
    -c "write -P 0x77 0 1M" -c "flush"
"$ZFTL" range delete "$DEL:256" --server "$CTL" >/dev/null || fail "zftl range delete --server"
live_is "live"
snap_is first "$WORK/in.bin" "live"
# MiB 0 overwritten, MiB 4 deleted: 256 blocks each.
diff_is "live" "0:256 $DEL:256" first
"$ZFTL" snapshot list --server "$CTL" --json >"$WORK/list.json"
kept=$(sed -n 's/.*"snapshot_versions": \([0-9]*\).*/\1/p' "$WORK/list.json")
if [ "${kept:-0}" -ge 512 ]; then
    pass "the snapshot keeps the $kept replaced blocks (256 overwritten + 256 deleted at least)"
else
    cat "$WORK/list.json"
    fail "snapshot_versions ${kept:-none} < 512"
fi

say "error cases: a name taken, an unknown name"
refused 1 "a second snapshot named first: exit 1, one line naming it" \
    "^zftl: error: server $CTL: snapshot_create: .*a snapshot named \"first\" exists" \
    snapshot create first --server "$CTL"
refused - "a diff against an unknown snapshot: exit 1, one line naming it" \
    "^zftl: error: server $CTL: snapshot_diff: .*no snapshot named \"nope\"" \
    snapshot diff first nope --server "$CTL"

say "clean restart"
if stop_server; then pass "zftl serve exits 0 on SIGTERM"; else fail "exit status on SIGTERM"; fi
start_server
live_is "after a clean restart"
snap_is first "$WORK/in.bin" "after a clean restart"
diff_is "after a clean restart" "0:256 $DEL:256" first

say "kill -9 and restart"
# A second snapshot, acknowledged since the last checkpoint, of the live
# state (as the last live_is read it: nothing was written since); then the
# volume changes again.
head -c $((DATA_MIB * MIB)) "$WORK/out.bin" >"$WORK/second16.bin"
"$ZFTL" snapshot create second --server "$CTL" >/dev/null || fail "snapshot create second"
qemu-io -f raw "$URI" -c "write -P 0x55 $((8 * MIB)) 1M" -c "flush" >/dev/null 2>&1 || fail "qemu-io 0x55"
kill9_server
start_server
snap_is first "$WORK/in.bin" "after kill -9 and a restart"
snap_is second "$WORK/second16.bin" "after kill -9 and a restart"
# MiB 8 (blocks 2048..2304) written after "second" only.
diff_is "after kill -9 and a restart" "2048:256" second
diff_is "after kill -9 and a restart" "0:256 $DEL:256" first second
diff_is "after kill -9 and a restart" "0:256 $DEL:256 2048:256" first
if "$ZFTL" snapshot list --server "$CTL" | grep -qE "^ +[0-9]+ +snapshot +second "; then
    pass "both snapshots are listed after kill -9"
else
    "$ZFTL" snapshot list --server "$CTL"
    fail "snapshot list after kill -9"
fi

say "protection window: points between NBD writes, zftl view --at, zftl revert --to"
stop_server || fail "SIGTERM before the window"
# 10m: a point at most every max(1 s, 600 s / 1024) = 1 s while the volume
# changes (1h would take one every 3.5 s), so rounds 1.2 s apart each get
# their own point, named by its second.
start_server --protect 10m
if grep -q "protect=10m (a point at most every 1.0 s" "$WORK/serve.log"; then
    pass "zftl serve --protect 10m logs its window"
else
    tail -5 "$WORK/serve.log"
    fail "no protect=10m in the start-up line"
fi
for r in 1 2 3 4; do
    head -c "$MIB" /dev/zero | tr '\0' "\\$(printf '%o' $((0xa0 + r)))" >"$WORK/round$r.bin"
    qemu-io -f raw "$URI" -c "write -P 0xa$r 0 1M" -c "flush" >/dev/null 2>&1 || fail "qemu-io round $r"
    [ "$r" -lt 4 ] && sleep 1.2
done
"$ZFTL" snapshot list --server "$CTL" >"$WORK/points.txt"
"$ZFTL" snapshot list --server "$CTL" --json >"$WORK/points.json"
cat "$WORK/points.txt"
# The points, oldest first, as their times (the names less the @).
mapfile -t POINTS < <(sed -n 's/^ *[0-9][0-9]* *point *@\([0-9TZ:-]*\) .*/\1/p' "$WORK/points.txt")
if [ "${#POINTS[@]}" -ge 3 ] && grep -q '"kind": "point"' "$WORK/points.json"; then
    pass "zftl snapshot list --server shows ${#POINTS[@]} points (kind point): ${POINTS[*]}"
else
    fail "fewer than 3 points after 4 rounds 1.2 s apart (${#POINTS[@]})"
fi
# mib0_is URI FILE WHAT: the first MiB of URI (a read-only view for -r)
# equals FILE, read with nbdcopy and checked with qemu-io's pattern.
mib0_is() {
    local uri=$1 want=$2 what=$3 pattern
    pattern=$(od -An -tx1 -N1 "$want" | tr -d ' ')
    rm -f "$WORK/mib0.bin"
    # head stops reading after a MiB; nbdcopy's broken pipe is no failure.
    (set +o pipefail; nbdcopy "$uri" - 2>/dev/null | head -c "$MIB" >"$WORK/mib0.bin")
    if cmp -s "$WORK/mib0.bin" "$want" \
        && qemu-io -r -f raw "$uri" -c "read -P 0x$pattern 0 1M" 2>&1 | grep -q "^read 1048576/1048576"; then
        pass "$what: nbdcopy and qemu-io read 0x$pattern in MiB 0 of $uri"
    else
        fail "$what: MiB 0 of $uri is not 0x$pattern"
    fi
}
# The first point holds round 1, the second round 2 (each point comes
# right after its round's write, before the next round).
if "$ZFTL" view --at "${POINTS[1]:-none}" --server "$CTL" --json >"$WORK/view.json"; then
    VIEW_URI=$(sed -n 's/^ *"uri": "\(.*\)",\{0,1\}$/\1/p' "$WORK/view.json")
    if grep -q "\"export\": \"zftl@@${POINTS[1]:-}\"" "$WORK/view.json" \
        && [ "$VIEW_URI" = "$BASE_URI/zftl@@${POINTS[1]:-}" ]; then
        pass "zftl view --at ${POINTS[1]:-} names export zftl@@${POINTS[1]:-} and its URI"
    else
        cat "$WORK/view.json"
        fail "zftl view export/uri"
    fi
    mib0_is "$VIEW_URI" "$WORK/round2.bin" "the view of the second point"
else
    fail "zftl view --at ${POINTS[1]:-none}"
fi
"$ZFTL" view --at "-1s" --server "$CTL" >"$WORK/view.txt" \
    && grep -q "^export: *zftl@@" "$WORK/view.txt" && pass "zftl view --at -1s names a point's export" \
    || { cat "$WORK/view.txt"; fail "zftl view --at -1s"; }
mib0_is "$URI" "$WORK/round4.bin" "before the revert, the live volume"
if "$ZFTL" revert --to "${POINTS[0]:-none}" --server "$CTL" >"$WORK/revert.txt" 2>&1 \
    && grep -q "^reverted server $CTL to point \"@${POINTS[0]:-}\"" "$WORK/revert.txt"; then
    pass "zftl revert --to ${POINTS[0]:-} --server"
else
    cat "$WORK/revert.txt"
    fail "zftl revert --to ${POINTS[0]:-none} --server"
fi
cat "$WORK/revert.txt"
mib0_is "$URI" "$WORK/round1.bin" "after the revert to the first point, the live volume"
UNDO=$(sed -n 's/^undo snapshot: *"\([^"]*\)".*/\1/p' "$WORK/revert.txt")
mib0_is "$BASE_URI/zftl@$UNDO" "$WORK/round4.bin" "the undo snapshot's view"
refused - "a revert to a day ago: exit 1, naming the oldest reachable time" \
    "^zftl: error: --to -1d: nothing reaches back to .*the oldest reachable time is " \
    revert --to -1d --server "$CTL"
kill9_server
start_server --protect 10m
mib0_is "$URI" "$WORK/round1.bin" "after kill -9 and a restart, the reverted volume"
if "$ZFTL" revert --to "$UNDO" --server "$CTL" >/dev/null; then
    pass "zftl revert --to $UNDO --server (undo the revert)"
else
    fail "revert to the undo snapshot"
fi
mib0_is "$URI" "$WORK/round4.bin" "after undoing the revert, the live volume"
"$ZFTL" snapshot list --server "$CTL" >"$WORK/points2.txt"
kept=0
for t in "${POINTS[@]}"; do grep -q " point *@$t " "$WORK/points2.txt" && kept=$((kept + 1)); done
if [ "${#POINTS[@]}" -gt 0 ] && [ "$kept" = "${#POINTS[@]}" ]; then
    pass "the $kept points are kept across kill -9"
else
    cat "$WORK/points2.txt"
    fail "points after kill -9 ($kept of ${#POINTS[@]})"
fi
mib0_is "$BASE_URI/zftl@@${POINTS[0]:-}" "$WORK/round1.bin" "after kill -9, the first point's view"

say "delete, then the image on its own"
"$ZFTL" snapshot delete first --server "$CTL" >/dev/null && pass "zftl snapshot delete first --server" \
    || fail "snapshot delete"
stop_server || fail "final SIGTERM"
if "$ZFTL" snapshot list --image "$IMAGE" --json >"$WORK/final.json" \
    && grep -q '"name": "second"' "$WORK/final.json" && ! grep -q '"name": "first"' "$WORK/final.json"; then
    pass "zftl snapshot list --image: second only"
else
    cat "$WORK/final.json"
    fail "final list"
fi
check_image

finish
