#!/usr/bin/env bash
# bench/whole_run_seeds.sh — bench/whole_run.sh over several seeds, then each side's final test top-1 (mean, median,
# min, max) and wall time. One run of the whole-run recipes ends up to 3.5 points low on either side when the loss
# spikes at the end of the warm-up (one epoch of it or two alike: perf-log step 110), so a comparison of accuracies
# needs several seeds.
#
#   bash bench/whole_run_seeds.sh [SET]        SET as whole_run.sh's (default fashion-mnist-50k)
#
# SEEDS (default "0 1 2 3 4"); every other variable goes to whole_run.sh. Seed after seed, ours and the twin in turn
# on the same GPU; the first pair starts from the caches it finds (empty CNN_CACHE_DIR and CUDA_CACHE_PATH
# directories for a cold start), the later ones reuse them (ours: the first run's tuning winners). Each seed's run
# directory is RUN_OUT-seedS (default runs/SET-seedS). The summary also goes to
# bench/results/DATE-MACHINE-SET-seeds.md.
set -u
cd "$(dirname "$0")/.."
SET=${1:-fashion-mnist-50k}
SEEDS=${SEEDS:-0 1 2 3 4}
BASE_OUT=${RUN_OUT:-runs/$SET}
if [ -z "${PYTHON:-}" ]; then  # found once here (each whole_run.sh would import torch to find it)
    for p in python3 /usr/bin/python3; do "$p" -c 'import torch, torchvision' 2>/dev/null && { PYTHON=$p; break; }; done
fi
export PYTHON=${PYTHON:-python3}
LOG=$(mktemp)
trap 'rm -f "$LOG" "$LOG".*' EXIT
build= head=
for s in $SEEDS; do
    echo "== seed $s"
    SEED=$s RUN_OUT=$BASE_OUT-seed$s RESULT_FILE=$LOG.$s.md SKIP_BUILD=$build bash bench/whole_run.sh "$SET" > "$LOG.$s" 2>&1
    rc=$?
    build=1  # built by the first seed's run
    [ -n "$head" ] || head=$(head -n 1 "$LOG.$s.md" 2>/dev/null) # "### MACHINE (DATE, commit C)", as whole_run.sh names it
    sed -n '/^== summary/,$p' "$LOG.$s" | grep '^RESULT' | sed "s/^/seed $s: /" | tee -a "$LOG"
    [ $rc -eq 0 ] || { tail -n 20 "$LOG.$s"; exit 1; }
done
summary=$(python3 - "$LOG" <<'PY'
import re, statistics, sys
rows = {"ours": [], "torch": []}
for line in open(sys.argv[1]):
    # ours' total_s is its process's wall time; the twin's is process wall_s (its total_s starts after import torch)
    m = re.match(r"seed (\d+): RESULT (ours|torch)\s+top1 ([0-9.]+)%.*?(?:process wall_s|total_s) ([0-9.]+)", line)
    w = re.search(r"process wall_s ([0-9.]+)", line)
    if m:
        rows[m.group(2)].append((float(m.group(3)), float(w.group(1) if w else m.group(4))))
for side, r in rows.items():
    if not r:
        print("%-5s no result" % side)
        continue
    t = [a for a, _ in r]
    w = [b for _, b in r]
    print("%-5s top1 mean %.2f%% median %.2f%% min %.2f%% max %.2f%% over %d seeds; wall s median %.1f (first %.1f)" % (
        side, statistics.mean(t), statistics.median(t), min(t), max(t), len(t), statistics.median(w), w[0]))
if rows["ours"] and rows["torch"]:
    d = statistics.mean(a for a, _ in rows["ours"]) - statistics.mean(a for a, _ in rows["torch"])
    print("ours - torch: mean top1 %+.2f points; wall %.2fx (medians)" % (
        d, statistics.median(b for _, b in rows["ours"]) / statistics.median(b for _, b in rows["torch"])))
PY
)
echo
echo "== summary over seeds $SEEDS ($SET)"
echo "$summary"
MACHINE=$(echo "$head" | cut -d' ' -f2)
{
    echo "$head, seeds $SEEDS"
    echo
    echo "\`SEEDS=\"$SEEDS\" bash bench/whole_run_seeds.sh $SET\`: bench/whole_run.sh once per seed."
    echo
    sed 's/^/- /' "$LOG"
    echo
    echo "$summary" | sed 's/^/- /'
} > "bench/results/$(date -u +%F)-$MACHINE-$SET-seeds.md"
