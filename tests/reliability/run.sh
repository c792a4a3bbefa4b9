#!/usr/bin/env bash
# tests/reliability/run.sh — the whole battery (make reliability): B15 at B15_POINTS (200) kill points, B16, B18 on
# the emulator (or B18_GPU=1), B19 at every call of a short run in each family. Prints every check and the figure
# lines, which also go to $BUILD/reliability/figures.txt (docs/RELIABILITY.md records them). Long: about an hour
# on two cores.
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
mkdir -p "$BUILD/reliability"
out=$BUILD/reliability/figures.txt
: >"$out"
rc=0
for s in b15_kill b16_nonfinite b18_oom b19_faults; do
    echo "== $s"
    bash "tests/reliability/$s.sh" | tee "$BUILD/reliability/$s.log" | grep -E '^(FAIL|SKIP|FIGURE)|passed'
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    grep '^FIGURE' "$BUILD/reliability/$s.log" >>"$out"
done
echo "figures in $out"
exit $rc
