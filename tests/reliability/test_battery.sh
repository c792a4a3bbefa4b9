#!/usr/bin/env bash
# test_battery.sh — `make test`'s share of the reliability battery (docs/RELIABILITY.md): B15 at 13 kill points
# over two checkpoint writes, B16 whole, B18 on the CPU emulator, B19 at every 60th call of each family. `make
# reliability` runs them in full (tests/reliability/run.sh).
cd "$(dirname "$0")/../.." || exit 1
rc=0
B15_POINTS=13 B15_STEPS=2 bash tests/reliability/b15_kill.sh || rc=1
bash tests/reliability/b16_nonfinite.sh || rc=1
bash tests/reliability/b18_oom.sh || rc=1
B19_EVERY=60 B19_JOBS=1 bash tests/reliability/b19_faults.sh || rc=1
exit $rc
