#!/usr/bin/env bash
# PyTorch workers: the Fashion-MNIST MLP as a PyTorch script through pstrain, beside the C++
# worker on the same job and the same script under PyTorch DDP (gloo), all in one invocation.
#
#   bench/pytorch.sh [BUILD_DIR]          (default build; EPOCHS=10, REPEATS=1)
#
# Every run: 2 workers on this machine, batch 256 per worker (global 512), Adam lr 0.002;
# pstrain runs have 2 servers, sync mode, the job's default cosine schedule. Prints a Markdown
# table: test accuracy, training samples/s (pstrain: global batch / mean step time, which leaves
# out start-up and evaluation; DDP: samples / time in its training loop) and the ratio to DDP,
# then where a PyTorch worker's step time goes.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BUILD="${1:-build}"
find_launcher "$0" "$BUILD"
EPOCHS="${EPOCHS:-10}"
REPEATS="${REPEATS:-1}"
PY=/usr/bin/python3
OUT="$(mktemp -d -t pstrain-bench-pytorch-XXXXXX)"
JOB=(--servers=2 --workers=2 --mode=sync --batch_size=256 --epochs="$EPOCHS")

echo "## PyTorch workers (bench/pytorch.sh, EPOCHS=$EPOCHS, REPEATS=$REPEATS)"
print_machine
for r in $(seq 1 "$REPEATS"); do
  "$LAUNCH" "${JOB[@]}" --summary_json="$OUT/cpp-$r.json" > "$OUT/cpp-$r.log" 2>&1 \
      || echo $? > "$OUT/cpp-$r.failed"
  "$LAUNCH" "${JOB[@]}" --model=external --summary_json="$OUT/torch-$r.json" \
      --worker_cmd="$PY examples/pytorch/fashion_mlp.py" > "$OUT/torch-$r.log" 2>&1 \
      || echo $? > "$OUT/torch-$r.failed"
  (cd examples/pytorch && $PY fashion_mlp_ddp.py --world_size=2 --epochs="$EPOCHS" --batch_size=256 \
      --result_json="$OUT/ddp-$r.json") > "$OUT/ddp-$r.log" 2>&1 || echo $? > "$OUT/ddp-$r.failed"
done
$PY bench/report.py pytorch "$OUT" "$REPEATS"
echo "(runs kept in $OUT)"
