#!/usr/bin/env bash
# What a 512-byte write costs against a 4 KiB one on `zftl serve`: fio's
# nbd engine, random writes at the same iodepth, 512 B and 4 KiB rounds
# alternating (which goes first alternates too, so drift of a shared
# machine falls on both), against `zftl serve --memory-mib 1024`. A 4 KiB
# write is one block write; a 512-byte write is a read-modify-write of its
# block (read, overlay, write, under the block's lock).
#
#   scripts/nbd-sector-cost.sh                 # 5 rounds of 10 s per size
#   ROUNDS=9 SECONDS_PER_ROUND=5 IODEPTH=32 scripts/nbd-sector-cost.sh
#
# The region written (256 MiB) is filled first, so the read of a
# read-modify-write finds data, not a hole. Prints every round (IOPS of
# each size, the server's CPU time per write from /proc, and the 512 B /
# 4 KiB ratio of each), then the minimum and median of each column. On a
# busy machine the CPU time per write is the steadier figure.
# Installs fio and libnbd-bin with apt-get when missing (needs root then).
# Uses $ZFTL, default target/release/zftl (built if absent).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
SECS=${SECONDS_PER_ROUND:-10}
IODEPTH=${IODEPTH:-16}
REGION=256M
die() { echo "nbd-sector-cost.sh: $*" >&2; exit 2; }

for t in fio nbdinfo; do
    command -v "$t" >/dev/null && continue
    [ "$(id -u)" = 0 ] || die "$t is missing and installing it needs root"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq fio libnbd-bin >/dev/null \
        || die "apt-get install fio libnbd-bin failed"
    command -v "$t" >/dev/null || die "$t still missing after apt-get install"
done
if [ -z "${ZFTL:-}" ]; then
    ZFTL="$ROOT/target/release/zftl"
    [ -x "$ZFTL" ] || (cd "$ROOT" && cargo build --release -q -p zftl-cli) || die "cargo build failed"
fi

WORK=$(mktemp -d /tmp/zftl-sector-cost.XXXXXX)
SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill -TERM "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

PORT=${PORT:-$((20000 + RANDOM % 10000))}
URI="nbd://127.0.0.1:$PORT"
"$ZFTL" serve --memory-mib 1024 --listen "127.0.0.1:$PORT" >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do
    nbdinfo --size "$URI" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/serve.log"; die "zftl serve exited"; }
    sleep 0.1
done
nbdinfo --size "$URI" >/dev/null 2>&1 || die "zftl serve did not come up on $URI"

# The server's CPU time so far (user + system), in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# One round of one size: "IOPS server_cpu_us_per_write". fio prints to
# stderr that it connected; the terse line goes to a file. Terse version 3
# fields: 47 KiB written, 49 write IOPS.
fio_round() {
    local bs=$1 bytes t0 t1
    case "$bs" in 4k) bytes=4096 ;; 512) bytes=512 ;; esac
    t0=$(cpu_ticks)
    (cd "$WORK" && fio --name="rw$bs" --ioengine=nbd --uri="$URI" --rw=randwrite --bs="$bs" \
        --iodepth="$IODEPTH" --size="$REGION" --runtime="$SECS" --time_based \
        --output-format=terse --terse-version=3 --output="$WORK/rw$bs.terse" 2>/dev/null) \
        || die "fio --bs=$bs failed"
    t1=$(cpu_ticks)
    awk -F';' -v b="$bytes" -v t=$((t1 - t0)) -v us="$TICK_US" \
        '{ printf "%d %.2f", $49, t * us / ($47 * 1024 / b); exit }' "$WORK/rw$bs.terse"
}

(cd "$WORK" && fio --name=fill --ioengine=nbd --uri="$URI" --rw=write --bs=128k --iodepth=8 \
    --size="$REGION" --output="$WORK/fill.txt" 2>/dev/null) || die "fio fill failed"

echo "zftl serve --memory-mib 1024; fio nbd randwrite over $REGION (filled), iodepth $IODEPTH, ${SECS} s per round"
echo "IOPS, the server's CPU time per write (us), and 512 B / 4 KiB of each"
fmt='%-7s %9s %9s %7s %9s %9s %7s\n'
# shellcheck disable=SC2059 # the format is ours
printf "$fmt" round 4k_iops 512_iops ratio 4k_cpu 512_cpu ratio
: >"$WORK/rows"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then
        read -r big bigcpu <<<"$(fio_round 4k)"; read -r small smallcpu <<<"$(fio_round 512)"
    else
        read -r small smallcpu <<<"$(fio_round 512)"; read -r big bigcpu <<<"$(fio_round 4k)"
    fi
    row=$(awk -v s="$small" -v b="$big" -v sc="$smallcpu" -v bc="$bigcpu" \
        'BEGIN { printf "%s %s %.3f %s %s %.3f", b, s, s / b, bc, sc, sc / bc }')
    echo "$row" >>"$WORK/rows"
    # shellcheck disable=SC2059,SC2086
    printf "$fmt" "$r" $row
done
# Column $1's minimum and median.
stat() {
    sort -g -k"$1","$1" "$WORK/rows" | awk -v c="$1" '{ v[NR] = $c } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%s %s", v[1], m }'
}
mins=() medians=()
for c in 1 2 3 4 5 6; do
    read -r lo mid <<<"$(stat "$c")"
    mins+=("$lo") medians+=("$mid")
done
# shellcheck disable=SC2059
printf "$fmt" min "${mins[@]}"
# shellcheck disable=SC2059
printf "$fmt" median "${medians[@]}"
