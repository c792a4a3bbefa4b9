# tests/lib.sh — helpers for the shell tests: PASS/FAIL/SKIP lines (counted by tests/run.sh) and a summary.
# Source it; call `finish` last.
set -u
BUILD=${BUILD:-build}
CNN=${CNN:-$BUILD/cnn}
PYTHON=${PYTHON:-/usr/bin/python3}
T_PASS=0; T_FAIL=0; T_SKIP=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/cnn-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

pass() { T_PASS=$((T_PASS + 1)); echo "PASS $1${2:+ $2}"; }
fail() { T_FAIL=$((T_FAIL + 1)); echo "FAIL $1: $2"; }
skip() { T_SKIP=$((T_SKIP + 1)); echo "SKIP $1: $2"; }
finish() { echo "$T_PASS passed, $T_FAIL failed, $T_SKIP skipped"; [ "$T_FAIL" -eq 0 ]; }

# expect NAME CODE PATTERN -- command...: exit status CODE and, for a failure, a one-line stderr matching
# PATTERN (grep -E); a crash (signal, sanitizer report) changes the status and fails the check.
expect() {
    local name=$1 code=$2 pattern=$3; shift 4
    local err="$TMP/stderr.$$"
    "$@" >"$TMP/stdout.$$" 2>"$err"
    local rc=$?
    local lines
    lines=$(grep -cv '^$' "$err")
    if [ "$rc" -ne "$code" ]; then
        fail "$name" "exit $rc, expected $code; stderr: $(head -c 600 "$err" | tr '\n' '|')"
    elif [ "$code" -ne 0 ] && ! grep -qE -- "$pattern" "$err"; then
        fail "$name" "stderr does not match /$pattern/: $(head -c 400 "$err" | tr '\n' '|')"
    elif [ "$code" -ne 0 ] && [ "$lines" -ne 1 ]; then
        fail "$name" "expected a one-line error, got $lines lines: $(head -c 400 "$err" | tr '\n' '|')"
    else
        pass "$name" "$(head -n1 "$err" | cut -c1-160)"
    fi
}
