#!/usr/bin/env bash
# The CTR model end to end: a SYNC cluster (2 servers x 2 workers, every role a process on this
# machine) against the same model, data and optimizers trained in one process with in-process
# tables (local_ctr_train) at the same global batch, run alternately; samples/s, their ratio and
# both test AUCs.
#
#   bench/ctr.sh BUILD_DIR            e.g. bench/ctr.sh build
#
# Needs BUILD_DIR/bin/{pstrain-launch and the role binaries, pstrain-gen-ctr, local_ctr_train}.
# Environment knobs:
#   CTR_DATA_DIR     data to train on (default: pstrain-gen-ctr's defaults, 2M + 200k records over
#                    1M distinct keys, written to a temporary folder and removed at the end)
#   CTR_BATCH        per-worker batch (default 512); the single process takes 2x
#   CTR_EPOCHS       epochs of each run (default 1)
#   CTR_REPEATS      repeats, reported as medians (default 3)
#   CTR_TRAIN_LIMIT  use only the first N training records (default 0: all)
# Each run's summary, log and last line are kept in a temporary folder whose name is printed.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" pstrain-gen-ctr local_ctr_train
BATCH="${CTR_BATCH:-512}"
EPOCHS="${CTR_EPOCHS:-1}"
REPEATS="${CTR_REPEATS:-3}"
TRAIN_LIMIT="${CTR_TRAIN_LIMIT:-0}"
OUT="$(mktemp -d -t pstrain-ctr.XXXXXX)"
DATA="${CTR_DATA_DIR:-}"
if [[ -z "$DATA" ]]; then
  DATA="$OUT/data"
  trap 'rm -rf "$DATA"' EXIT
  "$BIN/pstrain-gen-ctr" --out_dir="$DATA" > "$OUT/gen.log" 2>&1 || { echo "$0: pstrain-gen-ctr failed, see $OUT/gen.log" >&2; exit 1; }
fi
NPROC="$(nproc)"

echo "### (h) CTR end to end: 2 servers x 2 workers (SYNC) vs one process"
echo
print_machine
echo
echo "Data: \`$DATA\` ($(tail -1 "$OUT/gen.log" 2>/dev/null || echo "given"))."
echo "Cluster: \`pstrain-launch --model=ctr --servers=2 --workers=2 --mode=sync --batch_size=$BATCH"\
     "--epochs=$EPOCHS --train_limit=$TRAIN_LIMIT --eval_last_epoch_only\` (26 tables of dim 16, Adagrad 0.05;"\
     "MLP 256-128, Adam 0.002 with cosine decay). One process: \`local_ctr_train --batch_size=$((2 * BATCH))"\
     "--epochs=$EPOCHS\`, the same model, data, initial values and optimizers with an EmbeddingTable per table,"\
     "BLAS on 1 thread (as each worker) and on $NPROC."
echo "Training samples/s: cluster, the global batch over the mean step time (reading the batch, pulling"\
     "its rows, compute, push, wait, pull: the summary's step_time_ms); one process, the records over the"\
     "time of its training loop. Whole job: the summary's figure, which also counts start-up (the scheduler"\
     "counts the records), the barriers and the final evaluation. $REPEATS repeats, the order of the"\
     "cluster and the single process alternating; medians of the figures and of each repeat's ratios."
echo "CPU: user + system seconds of the whole run, every process (scheduler, servers, workers), start-up,"\
     "record counting and evaluation included on both sides; the ratio is one process's over the cluster's"\
     "(1 = no CPU spent on distribution)."
echo
# Each run's CPU seconds (user, system: every process of the run, the roles included) and wall
# seconds go to NAME.time; CPU time is what load from other processes disturbs least.
TIMEFORMAT='%U %S %R'
for R in $(seq 1 "$REPEATS"); do
  cluster() {
    { time { "$LAUNCH" --model=ctr --data_dir="$DATA" --servers=2 --workers=2 --mode=sync --batch_size="$BATCH" \
        --epochs="$EPOCHS" --train_limit="$TRAIN_LIMIT" --eval_last_epoch_only \
        --summary_json="$OUT/cluster-r$R.json" > "$OUT/cluster-r$R.log" 2>&1 || echo "$?" > "$OUT/cluster-r$R.failed"; }; } \
      2> "$OUT/cluster-r$R.time"
  }
  local_run() {  # $1: BLAS threads
    { time { "$BIN/local_ctr_train" --data_dir="$DATA" --batch_size="$((2 * BATCH))" --epochs="$EPOCHS" \
        --train_limit="$TRAIN_LIMIT" --blas_threads="$1" 2> "$OUT/local-t$1-r$R.log" | tail -1 > "$OUT/local-t$1-r$R.txt" ||
        echo "$?" > "$OUT/local-t$1-r$R.failed"; }; } 2> "$OUT/local-t$1-r$R.time"
  }
  if (( R % 2 )); then
    cluster; local_run 1; local_run "$NPROC"
  else
    local_run "$NPROC"; local_run 1; cluster
  fi
done
python3 "$HERE/report.py" ctr "$OUT" "$REPEATS" "$NPROC"
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Raw outputs: $OUT"
