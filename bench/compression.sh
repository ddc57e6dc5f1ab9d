#!/usr/bin/env bash
# Gradient compression on the demo job: what each --compression saves on the wire and what it
# costs in accuracy, against uncompressed float32 run in the same invocation.
#
#   bench/compression.sh BUILD_DIR        e.g. bench/compression.sh build
#
# Each run is the demo (pstrain-launch with its defaults: 2 servers x 2 workers, SYNC, MLP, Adam,
# all of Fashion-MNIST) with one --compression; the bytes come from the servers' transport
# counters (server/ps_service.h). Environment knobs:
#   COMPRESSION_KINDS   the settings to compare (default "none fp16 bf16 topk:0.1 topk:0.01";
#                       the ratio columns need "none" among them)
#   COMPRESSION_FLAGS   more pstrain-launch flags for every run (e.g. "--epochs=3")
# Each run's summary JSON and log are kept in a temporary folder whose name is printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_launcher "$0" "$1"
KINDS="${COMPRESSION_KINDS:-none fp16 bf16 topk:0.1 topk:0.01}"
read -r -a EXTRA <<< "${COMPRESSION_FLAGS:-}"
OUT="$(mktemp -d -t pstrain-compression.XXXXXX)"

echo "### (f) Gradient compression on the demo job"
echo
print_machine
echo
echo "Each run: \`pstrain-launch --compression=C ${EXTRA[*]:-}\` (the demo otherwise). Pushed: the"\
     "bytes the servers received (gradients, and the few bytes of pull requests), summed over"\
     "servers, from their transport counters; pulled: what they sent (weights, always float32)."
echo "Training samples/s: global batch / mean step time from the summary's step_time_ms."
echo

for C in $KINDS; do
  NAME="c-${C//:/_}"
  "$LAUNCH" --compression="$C" "${EXTRA[@]}" --summary_json="$OUT/$NAME.json" > "$OUT/$NAME.log" 2>&1 ||
    echo "$?" > "$OUT/$NAME.failed"
done

python3 "$HERE/report.py" compression "$OUT" $KINDS
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Raw outputs: $OUT"
