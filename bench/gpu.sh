#!/usr/bin/env bash
# GPU figures: the CUDA backend's tests, the models' GEMM shapes, and whole training jobs on the GPU
# against the same jobs on the same machine's CPU.
#
#   bench/gpu.sh BUILD_DIR        e.g. bench/gpu.sh build   (a build with the CUDA backend)
#
# What it runs, in this order:
#   1. the tests labelled gpu (model_cuda_backend_test, model_cuda_sparse_test), which must pass;
#   2. gemm_bench (every GEMM shape of the MLP and the CNN, FP32 and TF32, against a large square
#      GEMM on the same device);
#   3. pstrain-launch jobs (2 servers x 2 workers, sync): the demo MLP on cuda twice and on cpu once,
#      the CNN for 2 epochs on cuda twice, with --tf32, at batch 256, and on cpu, and the CNN's
#      default 8 epochs on cuda. Two runs of one GPU job must give the same final model bit for bit:
#      the script prints the models' SHA-256 and fails if they differ.
# Environment knobs:
#   GPU_JOB_TIMEOUT   seconds each job may take (default 600; a slow CPU run is cut there and
#                     reported with the samples/s it had reached)
#   GPU_DATA_DIR      Fashion-MNIST folder (default: pstrain-launch's)
# Every job's summary JSON, log and model are kept in a temporary folder printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" pstrain-scheduler pstrain-server pstrain-worker gemm_bench
TESTS="$(cd "$1" && pwd)/tests"
OUT="$(mktemp -d -t pstrain-gpu.XXXXXX)"
TIMEOUT="${GPU_JOB_TIMEOUT:-600}"
DATA=()
[[ -n "${GPU_DATA_DIR:-}" ]] && DATA=(--data_dir="$GPU_DATA_DIR")

echo "### GPU"
echo
print_machine
command -v nvidia-smi > /dev/null &&
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
echo

echo "#### The tests labelled gpu"
for t in model_cuda_backend_test model_cuda_sparse_test; do
  [[ -x "$TESTS/$t" ]] || { echo "$0: $TESTS/$t not found: build with the CUDA backend" >&2; exit 1; }
  "$TESTS/$t" > "$OUT/$t.txt" 2>&1 || { cat "$OUT/$t.txt"; echo "$0: $t failed" >&2; exit 1; }
  if grep -q "SKIPPED \]" "$OUT/$t.txt"; then
    echo "$0: $t skipped its tests: no CUDA device" >&2
    exit 1
  fi
  echo "- $t: $(grep -E '^\[  PASSED  \]' "$OUT/$t.txt")"
done
echo

echo "#### GEMM shapes (gemm_bench)"
echo '```'
"$BIN/gemm_bench" --benchmark_min_time=0.2 2>&1 | grep -E "GFLOP/s"
echo '```'
echo

# job NAME FLAGS...: one pstrain-launch run; prints one table row.
job() {
  local name="$1"
  shift
  local rc=0
  timeout "$TIMEOUT" "$LAUNCH" --bin_dir="$BIN" "${DATA[@]}" --http_port=0 \
    --summary_json="$OUT/$name.json" --final_model="$OUT/$name.model" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  /usr/bin/python3 - "$OUT/$name.json" "$name" "$rc" "$*" << 'EOF'
import json, sys
path, name, rc, flags = sys.argv[1:]
try:
    s = json.load(open(path))
except (OSError, ValueError):
    print(f"| {name} | `{flags}` | failed (exit {rc}): no summary | | | |")
    sys.exit(0)
st = s.get("step_time_ms") or {}
split = " + ".join(f"{st.get(k, 0):.2f}" for k in ("compute", "push", "wait", "pull"))
acc = s.get("final_test_accuracy")
acc = f"{acc:.4f}" if acc is not None else f"cut at {s.get('wall_seconds', 0):.0f} s"
print(f"| {name} | `{flags}` | {s.get('samples_per_second', 0):,.0f} | {split} | {acc} | {s.get('wall_seconds', 0):.1f} |")
EOF
}

echo "#### Training jobs (2 servers x 2 workers, sync)"
echo
echo "| job | flags | training samples/s | step ms = compute + push + wait + pull | test accuracy | wall s |"
echo "|---|---|---:|---|---:|---:|"
job mlp_cuda_a --device=cuda
job mlp_cuda_b --device=cuda
job mlp_cpu --device=cpu
job cnn_cuda_a --model=cnn --device=cuda --epochs=2
job cnn_cuda_b --model=cnn --device=cuda --epochs=2
job cnn_cuda_tf32 --model=cnn --device=cuda --epochs=2 --tf32
job cnn_cuda_b256 --model=cnn --device=cuda --epochs=2 --batch_size=256
job cnn_cpu --model=cnn --device=cpu --epochs=2
job cnn_cuda_8 --model=cnn --device=cuda
echo

echo "#### Repeatability"
status=0
for pair in mlp_cuda_a:mlp_cuda_b cnn_cuda_a:cnn_cuda_b; do
  a="$OUT/${pair%%:*}.model" b="$OUT/${pair##*:}.model"
  if [[ -f "$a" && -f "$b" ]] && cmp -s "$a" "$b"; then
    echo "- ${pair/:/ and }: the same final model bit for bit ($(sha256sum "$a" | cut -c1-16))"
  else
    echo "- ${pair/:/ and }: the final models DIFFER (or one is missing)"
    status=1
  fi
done
echo
echo "Summaries, logs and models: $OUT"
exit "$status"
