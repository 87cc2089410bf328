#!/usr/bin/env bash
# Fuzzes zftl-nbd's handshake and request parsing with cargo-fuzz (libFuzzer)
# for a bounded time: each target in crates/nbd-frontend/fuzz runs for
# SECONDS (default 60), starting from the committed seeds.
#
#   scripts/fuzz.sh [SECONDS]
#
# Installs cargo-fuzz when it is missing and fails loudly if it cannot. Works
# on the stable toolchain: cargo-fuzz needs -Z flags, which RUSTC_BOOTSTRAP=1
# unlocks. A crash leaves its input in crates/nbd-frontend/fuzz/artifacts/
# <target>/ (replay: RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <file>, from
# crates/nbd-frontend). Exits non-zero if any target crashed; the last line
# is "N passed, N failed" (one per target).
set -uo pipefail

cd "$(dirname "$0")/.."
seconds="${1:-60}"
case "$seconds" in
  '' | *[!0-9]*) echo "scripts/fuzz.sh: error: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;;
esac

export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz"
  if ! cargo install --locked cargo-fuzz; then
    echo "scripts/fuzz.sh: error: 'cargo install cargo-fuzz' failed; cannot fuzz" >&2
    exit 1
  fi
fi
cargo fuzz --version

cd crates/nbd-frontend
echo "==> building the fuzz targets"
if ! cargo fuzz build; then
  echo "scripts/fuzz.sh: error: 'cargo fuzz build' failed" >&2
  exit 1
fi

targets="$(cargo fuzz list)"
passed=0
failed=0
for target in $targets; do
  echo "==> fuzzing $target for ${seconds}s"
  corpus="fuzz/corpus/$target"
  mkdir -p "$corpus"
  # The first directory collects new inputs; the seeds are read only.
  if cargo fuzz run "$target" "$corpus" "fuzz/seeds/$target" -- \
      -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1; then
    echo "PASS $target"
    passed=$((passed + 1))
  else
    echo "FAIL $target (the crashing input is in fuzz/artifacts/$target/)"
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
