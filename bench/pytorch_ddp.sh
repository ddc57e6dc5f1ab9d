#!/usr/bin/env bash
# A PyTorch user's own model through pstrain against the same script under DistributedDataParallel,
# in one invocation with the runs alternating: the MLP, the example CNN and a CNN with BatchNorm and
# dropout (examples/pytorch/fashion_{mlp,cnn,cnn_bn}.py against fashion_mlp_ddp.py --model=...).
#
#   bench/pytorch_ddp.sh [BUILD_DIR]        (default build)
#
# pstrain: 2 servers x 2 workers, sync, batch 64 per worker, secured by default (pstrain-launch's
# throwaway credentials; same-host workers on unix sockets), the job's Adam lr 0.002. DDP: gloo, 2
# processes, batch 64 each, Adam lr 0.002. Training samples/s: pstrain, the global batch over the
# mean step time; DDP, the samples over the time in its training loop (both leave out start-up
# and evaluation). Prints a Markdown table per model and where a pstrain step goes.
# Environment knobs:
#   MODELS       which models (default "mlp cnn cnn_bn")
#   EPOCHS       epochs of each run (default 1)
#   TRAIN_LIMIT  training samples (default 0: all 60000)
#   REPEATS      alternating pairs per model, reported as medians (default 3)
#   EXTRA_FLAGS  more pstrain-launch flags for the pstrain side (e.g. --insecure)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BUILD="${1:-build}"
find_launcher "$0" "$BUILD"
MODELS="${MODELS:-mlp cnn cnn_bn}"
EPOCHS="${EPOCHS:-1}"
TRAIN_LIMIT="${TRAIN_LIMIT:-0}"
REPEATS="${REPEATS:-3}"
PY=/usr/bin/python3
OUT="$(mktemp -d -t pstrain-bench-ddp-XXXXXX)"
# shellcheck disable=SC2206
EXTRA=(${EXTRA_FLAGS:-})

echo "## A PyTorch script through pstrain against DDP (bench/pytorch_ddp.sh, EPOCHS=$EPOCHS, TRAIN_LIMIT=$TRAIN_LIMIT, REPEATS=$REPEATS)"
echo
print_machine
for model in $MODELS; do
  script="fashion_${model}.py"
  for r in $(seq 1 "$REPEATS"); do
    "$LAUNCH" --servers=2 --workers=2 --mode=sync --batch_size=64 --epochs="$EPOCHS" --model=external \
        --eval_last_epoch_only "${EXTRA[@]}" \
        --summary_json="$OUT/$model-pstrain-$r.json" \
        --worker_cmd="$PY examples/pytorch/$script --train_limit=$TRAIN_LIMIT" > "$OUT/$model-pstrain-$r.log" 2>&1 \
        || echo $? > "$OUT/$model-pstrain-$r.failed"
    (cd examples/pytorch && $PY fashion_mlp_ddp.py --model="$model" --world_size=2 --epochs="$EPOCHS" \
        --batch_size=64 --train_limit="$TRAIN_LIMIT" --result_json="$OUT/$model-ddp-$r.json") \
        > "$OUT/$model-ddp-$r.log" 2>&1 || echo $? > "$OUT/$model-ddp-$r.failed"
  done
done
$PY bench/report.py pytorch_ddp "$OUT" "$REPEATS" $MODELS
echo
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "(runs kept in $OUT)"
