#!/usr/bin/env bash
# Fuzzes zftl's parsers of untrusted input with cargo-fuzz (libFuzzer) for a
# bounded time: each target runs for SECONDS (default 60), starting from the
# committed seeds. Two cargo-fuzz directories:
#   crates/nbd-frontend/fuzz  the NBD handshake, option and request parsing;
#   fuzz                      the control protocol's request lines (zftl::control).
#
#   scripts/fuzz.sh [SECONDS]
#
# Installs cargo-fuzz when it is missing and fails loudly if it cannot. Works
# on the stable toolchain: cargo-fuzz needs -Z flags, which RUSTC_BOOTSTRAP=1
# unlocks. A crash leaves its input in <dir>/fuzz/artifacts/<target>/
# (replay: RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <file>, from <dir>:
# crates/nbd-frontend or the repository root). Exits non-zero if any target
# crashed or a directory did not build; the last line is "N passed, N
# failed" (one per target, over both directories).
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

root="$PWD"
passed=0
failed=0
for dir in crates/nbd-frontend .; do
  cd "$root/$dir" || exit 1
  echo "==> building the fuzz targets in $dir/fuzz"
  if ! cargo fuzz build; then
    echo "FAIL cargo fuzz build in $dir/fuzz"
    failed=$((failed + 1))
    continue
  fi
  targets="$(cargo fuzz list)"
  for target in $targets; do
    echo "==> fuzzing $target ($dir/fuzz) for ${seconds}s"
    corpus="fuzz/corpus/$target"
    mkdir -p "$corpus"
    # The first directory collects new inputs; the seeds are read only.
    if cargo fuzz run "$target" "$corpus" "fuzz/seeds/$target" -- \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1; then
      echo "PASS $target"
      passed=$((passed + 1))
    else
      echo "FAIL $target (the crashing input is in $dir/fuzz/artifacts/$target/)"
      failed=$((failed + 1))
    fi
  done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
