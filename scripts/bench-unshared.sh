#!/usr/bin/env bash
# Is unshared I/O as fast as before shared blocks existed? Builds
# examples/unshared_io.rs (4 KiB random writes, then reads, 16 in flight,
# on the in-memory simulator with timing off) on this checkout and on BASE
# (default: 3a2dd36, the last commit before shared blocks and range
# operations), then runs the two in turn, ROUNDS times each (A B A B ...),
# and prints every round's rates, each pair's ratio (this ÷ base) and the
# minimum and median ratio: per wall second, and per second of user CPU
# time of the thread (which neither other processes' load nor the kernel's
# page faults on the in-memory device move, so it is the steadier ratio on
# a shared machine).
#
#   scripts/bench-unshared.sh [ROUNDS [BASE]]
#
# The base is built in a temporary git worktree (removed at exit) with the
# same example file copied in, so both sides run the same workload source.
set -euo pipefail

cd "$(dirname "$0")/.."
rounds="${1:-5}"
base="${2:-3a2dd36}"
case "$rounds" in
  '' | *[!0-9]*) echo "bench-unshared.sh: ROUNDS must be a whole number, got '$rounds'" >&2; exit 2 ;;
esac
git rev-parse --verify -q "$base^{commit}" >/dev/null || {
  echo "bench-unshared.sh: error: no commit '$base' in this repository" >&2
  exit 1
}

work="$(mktemp -d)"
cleanup() {
  git worktree remove --force "$work/base" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "==> building this checkout's example"
cargo build --release -q --example unshared_io
cp target/release/examples/unshared_io "$work/new"

echo "==> building the example on $base"
git worktree add -q --detach "$work/base" "$base"
mkdir -p "$work/base/examples"
cp examples/unshared_io.rs "$work/base/examples/"
(cd "$work/base" && CARGO_TARGET_DIR="$work/target" cargo build --release -q --example unshared_io)
cp "$work/target/release/examples/unshared_io" "$work/old"

python3 - "$work" "$rounds" <<'PY'
import json, statistics, subprocess, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def run(which):
    out = subprocess.run([f"{work}/{which}"], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
ratios = {"writes_per_s": [], "reads_per_s": [], "writes_per_user_s": [], "reads_per_user_s": []}
for r in range(rounds):
    new, old = run("new"), run("old")
    for k in ratios:
        ratios[k].append(new[k] / old[k])
    print(f"round {r}: this {new}  base {old}  ratio writes {ratios['writes_per_s'][-1]:.3f} reads {ratios['reads_per_s'][-1]:.3f}"
          f" per user CPU second: writes {ratios['writes_per_user_s'][-1]:.3f} reads {ratios['reads_per_user_s'][-1]:.3f}")
for k, v in ratios.items():
    print(f"{k} ratio (this / base): min {min(v):.3f} median {statistics.median(v):.3f} rounds {[round(x, 3) for x in v]}")
PY
