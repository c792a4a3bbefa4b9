# tests/reliability/lib.sh — what the battery scripts share (sourced after tests/lib.sh): the fault shim, built
# on demand into $BUILD/reliability, a strict JSON check of metrics files, and the figure line each script ends
# with ("FIGURE Bnn: ..."), which docs/RELIABILITY.md records.
REL=$ROOT/tests/reliability
SHIM_DIR=$BUILD/reliability
case $SHIM_DIR in /*) ;; *) SHIM_DIR=$ROOT/$SHIM_DIR ;; esac
mkdir -p "$SHIM_DIR"
SHIM=$SHIM_DIR/shim.so
SHIM_NOMALLOC=$SHIM_DIR/shim_nomalloc.so
if [ ! -f "$SHIM" ] || [ "$REL/shim.c" -nt "$SHIM" ]; then
    ${CC:-cc} -shared -fPIC -O1 -Wall -Wextra -Werror -o "$SHIM" "$REL/shim.c" -ldl || exit 1
    ${CC:-cc} -DSHIM_NO_MALLOC -shared -fPIC -O1 -Wall -Wextra -Werror -o "$SHIM_NOMALLOC" "$REL/shim.c" -ldl || exit 1
fi
ED="$PYTHON $REL/stedit.py"
records() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null); echo "${n:-0}"; }
losses() { "$PYTHON" -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "loss" in r: print(r["step"], r["loss"])' "$1"; }
figure() { echo "FIGURE $*"; }
# classify the exit status of a run under a fault: ok (0), error (1 or 2, with a message), hang (124, timeout),
# crash (a signal or anything else)
classify() {
    case $1 in
    0) echo ok ;;
    1 | 2) echo error ;;
    124) echo hang ;;
    *) echo crash ;;
    esac
}
