# shellcheck shell=bash
# What the shell tests under tests/ share, sourced by each of them after
# its `set` line:
#
#   . "$(dirname "$0")/lib.sh"
#
# It gives them the PASS/FAIL counters (pass, fail, die, say), the
# clients from Debian packages (need_tools), the zftl binary ($ZFTL, built
# with cargo when not given), a work directory ($WORK, removed at exit), a
# simulated image (make_image) and `zftl serve` on it on a free port of
# 127.0.0.1 (start_server, stop_server, kill9_server). At exit, however
# the script ends, the server is killed, $WORK removed and the summary
# line "=== summary: N passed, N failed" printed; the exit status is 0
# only if the script reached `finish` and nothing failed.
#
# Environment: ZFTL (the binary), PORT (a fixed port instead of a free
# one).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TEST_NAME=$(basename "$0")
PASSED=0
FAILED=0
WORK=
SERVER_PID=
FIXED_PORT=${PORT:-}
PORT=
BASE_URI=
URI=

say() { printf '\n=== %s\n' "$*"; }
pass() { echo "PASS: $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
# die MESSAGE: a failure the script cannot go on from.
die() {
    echo "$TEST_NAME: fatal: $*" >&2
    FAILED=$((FAILED + 1))
    exit 2
}
# finish: the end of the checks; the exit handler prints the summary.
finish() { exit 0; }

# A script may define cleanup_extra (its mounts, its other processes); it
# runs first at exit.
lib_exit() {
    local rc=$?
    set +e
    if declare -F cleanup_extra >/dev/null; then cleanup_extra; fi
    if [ -n "$SERVER_PID" ]; then
        kill -KILL "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
        SERVER_PID=
    fi
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        if { [ "$rc" != 0 ] || [ "$FAILED" != 0 ]; } && [ -s "$WORK/serve.try.log" ]; then
            echo "--- last lines of the last server's log"
            tail -n 30 "$WORK/serve.try.log" 2>/dev/null
        fi
        # Never rm -rf through a mount that could not be taken down.
        if ! grep -q " $WORK/" /proc/mounts; then rm -rf "$WORK"; fi
    fi
    if [ "$rc" != 0 ] && [ "$FAILED" = 0 ]; then
        echo "$TEST_NAME: aborted (exit status $rc)" >&2
        FAILED=1
    fi
    say "summary: $PASSED passed, $FAILED failed"
    if [ "$FAILED" != 0 ] && [ "$rc" = 0 ]; then rc=1; fi
    exit "$rc"
}
trap lib_exit EXIT
trap 'exit 130' INT TERM

# need_tools "PACKAGE..." TOOL...: every TOOL on the PATH, installing the
# Debian PACKAGEs with apt-get (as root) when one is missing; dies when
# they cannot be installed.
need_tools() {
    local packages=$1 t missing=()
    shift
    for t in "$@"; do command -v "$t" >/dev/null || missing+=("$t"); done
    [ "${#missing[@]}" = 0 ] && return 0
    [ "$(id -u)" = 0 ] || die "${missing[*]} missing, and installing $packages needs root"
    say "installing $packages (missing: ${missing[*]})"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq || die "apt-get update failed"
    # shellcheck disable=SC2086 # $packages is a list of names
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null \
        || die "apt-get install $packages failed"
    for t in "$@"; do
        command -v "$t" >/dev/null || die "$t still missing after apt-get install $packages"
    done
}

# ----- the binary and the work directory ---------------------------------------
if [ -z "${ZFTL:-}" ]; then
    say "building zftl (release)"
    (cd "$ROOT" && cargo build --release -q -p zftl-cli) || die "cargo build failed"
    ZFTL="$ROOT/target/release/zftl"
fi
[ -x "$ZFTL" ] || die "no zftl binary at $ZFTL"
WORK=$(mktemp -d "/tmp/zftl-${TEST_NAME%.sh}.XXXXXX") || die "mktemp failed"
IMAGE="$WORK/dev.img"
CTL="$IMAGE.control"

# make_image PATH BLOCKS_PER_LUN [format [FLAGS...]]: a simulated device
# of 8 channels x 2 LUNs x BLOCKS_PER_LUN blocks x 256 pages of 4 KiB
# (32: 512 MiB), formatted with FLAGS when `format` is given (else `zftl
# serve` formats it with the defaults).
make_image() {
    local path=$1 blocks=$2
    shift 2
    "$ZFTL" sim create "$path" --blocks-per-lun "$blocks" >/dev/null || die "zftl sim create $path failed"
    if [ "${1:-}" = format ]; then
        shift
        "$ZFTL" format --image "$path" "$@" >/dev/null || die "zftl format $* $path failed"
    fi
}

# ----- a free port on 127.0.0.1 ---------------------------------------------------
# Below the kernel's ephemeral range (so no outgoing connection holds it),
# one no socket uses now. A server that still loses a race for it is
# restarted on another port (start_server).
port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null || return 1
    if command -v ss >/dev/null; then
        [ -z "$(ss -Htan "( sport = :$1 )" 2>/dev/null)" ] || return 1
    fi
}
pick_port() {
    if [ -n "$FIXED_PORT" ]; then PORT=$FIXED_PORT; return 0; fi
    local lo p
    lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$lo" -gt 11000 ] || lo=32768
    for _ in $(seq 1 200); do
        p=$((10000 + RANDOM % (lo - 10000)))
        if port_free "$p"; then PORT=$p; return 0; fi
    done
    die "no free port found"
}
set_port() {
    BASE_URI="nbd://127.0.0.1:$PORT"
    URI="$BASE_URI/zftl"
}
pick_port
set_port

# ----- zftl serve ----------------------------------------------------------------
# SERVE_LOG: RUST_LOG for the next start_server (empty: the server's own
# default). READY_PROBE: when set, a zftl subcommand (e.g. `snapshot
# list`) that must also answer through --server "$CTL" before the server
# counts as up.
SERVE_LOG=
READY_PROBE=()

# start_server [FLAGS...]: `zftl serve` on $IMAGE with these extra flags,
# on $PORT unless a socket holds it now (then on a free one); sets
# SERVER_PID, PORT, BASE_URI and URI, and returns once NBD (and
# READY_PROBE) answer. Its log goes to $WORK/serve.try.log, then to the
# end of $WORK/serve.log.
start_server() {
    local up
    for _ in 1 2 3 4 5; do
        port_free "$PORT" || pick_port
        set_port
        : >"$WORK/serve.try.log"
        (
            if [ -n "$SERVE_LOG" ]; then export RUST_LOG=$SERVE_LOG; fi
            exec "$ZFTL" serve --image "$IMAGE" --listen "127.0.0.1:$PORT" "$@"
        ) >"$WORK/serve.try.log" 2>&1 &
        SERVER_PID=$!
        up=0
        for _ in $(seq 1 600); do
            if nbdinfo --size "$URI" >/dev/null 2>&1 \
                && { [ "${#READY_PROBE[@]}" = 0 ] \
                    || "$ZFTL" "${READY_PROBE[@]}" --server "$CTL" >/dev/null 2>&1; }; then
                up=1
                break
            fi
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        cat "$WORK/serve.try.log" >>"$WORK/serve.log"
        if [ "$up" = 1 ]; then
            echo "zftl serve (pid $SERVER_PID) on $URI"
            return 0
        fi
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            cat "$WORK/serve.try.log"
            die "zftl serve did not come up on port $PORT${READY_PROBE[*]:+ with control socket $CTL}"
        fi
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
        if grep -q "Address already in use" "$WORK/serve.try.log" && [ -z "$FIXED_PORT" ]; then
            echo "port $PORT was taken: trying another one"
            pick_port
            continue
        fi
        cat "$WORK/serve.try.log"
        die "zftl serve exited at start"
    done
    die "zftl serve could not get a port"
}

# stop_server: SIGTERM (drain, flush, checkpoint); returns the server's
# exit status.
stop_server() {
    local rc=0
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=
    return "$rc"
}

# kill9_server: SIGKILL, as a crash.
kill9_server() {
    kill -KILL "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}

# ----- checks ----------------------------------------------------------------------
# qemu_io_ok WHAT URI ARGS...: `qemu-io -f raw URI ARGS` succeeds and
# reports no failure, error or mismatch; PASS or FAIL WHAT (with qemu-io's
# output on a FAIL).
qemu_io_ok() {
    local what=$1 uri=$2
    shift 2
    if qemu-io -f raw "$uri" "$@" >"$WORK/qio.txt" 2>&1 \
        && ! grep -qiE "fail|error|mismatch" "$WORK/qio.txt"; then
        pass "$what"
    else
        cat "$WORK/qio.txt"
        fail "$what"
    fi
}

# refused LINES WHAT PATTERN ARGS...: `zftl ARGS` exits 1, prints nothing
# on stdout, and on stderr (shown) a line matching PATTERN (grep), LINES
# lines in all (- for any number); PASS or FAIL WHAT.
refused() {
    local lines=$1 what=$2 pattern=$3 rc=0
    shift 3
    "$ZFTL" "$@" >"$WORK/err.out" 2>"$WORK/err.txt" || rc=$?
    cat "$WORK/err.txt"
    if [ "$rc" = 1 ] && [ ! -s "$WORK/err.out" ] \
        && { [ "$lines" = - ] || [ "$(wc -l <"$WORK/err.txt")" = "$lines" ]; } \
        && grep -q "$pattern" "$WORK/err.txt"; then
        pass "$what"
    else
        fail "$what (exit $rc)"
    fi
}

# check_image: `zftl check` finds $IMAGE clean (with the server stopped).
check_image() {
    if "$ZFTL" check --image "$IMAGE" >"$WORK/check.txt" 2>&1; then
        pass "zftl check: clean"
    else
        tail -20 "$WORK/check.txt"
        fail "zftl check"
    fi
}
