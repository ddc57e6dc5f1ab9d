#!/usr/bin/env bash
# CTR accuracy against the planted model: pstrain-gen-ctr's default data (2M training and 200k
# test records, 26 fields, 1M distinct keys), trained by --model=ctr four ways in one invocation:
#
#   sync 2x2     2 servers x 2 workers, SYNC, batch B per worker
#   sync 1x1     1 server x 1 worker, SYNC, batch 2B: the same global batch
#   async 2x2    2 servers x 2 workers, ASYNC, batch B per worker
#   sync 2x2 fm  as sync 2x2 with --ctr_interaction=fm (DeepFM: the pairwise term added)
#
# and prints a Markdown table of each run's test AUC (over the whole test set, from the merged
# score histograms, with its error bound) and log loss, beside the planted model's AUC, the best
# a model can expect on this data.
#
#   bench/ctr_accuracy.sh [BUILD_DIR]      (EPOCHS=3, BATCH=512; DATA=dir to reuse data)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BUILD="${1:-build}"
find_binaries "$0" "$BUILD" pstrain-gen-ctr
EPOCHS="${EPOCHS:-3}"
BATCH="${BATCH:-512}"
OUT="$(mktemp -d -t pstrain-bench-ctr-XXXXXX)"
DATA="${DATA:-$OUT/data}"
if [[ ! -f "$DATA/planted.json" ]]; then
  mkdir -p "$DATA"
  # The generator's last line is the planted model's own test AUC.
  "$BIN/pstrain-gen-ctr" --out_dir="$DATA" | tail -n 1 > "$DATA/planted.json"
fi
PLANTED="$(grep -o '"planted_test_auc": [0-9.]*' "$DATA/planted.json" | cut -d' ' -f2)"
JOB=(--model=ctr --data_dir="$DATA" --epochs="$EPOCHS")

echo "## CTR accuracy (bench/ctr_accuracy.sh, EPOCHS=$EPOCHS, BATCH=$BATCH)"
print_machine
run() {  # NAME FLAGS...
  local name="$1"; shift
  "$LAUNCH" "${JOB[@]}" "$@" --summary_json="$OUT/$name.json" > "$OUT/$name.log" 2>&1 || echo "$name failed: see $OUT/$name.log"
}
run sync22 --servers=2 --workers=2 --mode=sync --batch_size="$BATCH"
run sync11 --servers=1 --workers=1 --mode=sync --batch_size=$((2 * BATCH))
run async22 --servers=2 --workers=2 --mode=async --batch_size="$BATCH"
run sync22fm --servers=2 --workers=2 --mode=sync --batch_size="$BATCH" --ctr_interaction=fm
/usr/bin/python3 bench/ctr_accuracy_report.py "$OUT" "$PLANTED"
echo "(runs kept in $OUT)"
