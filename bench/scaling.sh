#!/usr/bin/env bash
# The scaling table: SYNC training with 1, 2 and 4 workers against 1 and 2 parameter servers, at a
# fixed per-worker batch (so the global batch grows with the workers), with the bytes each server
# actually moved, as its transport counters measured them (server/ps_service.h).
#
#   bench/scaling.sh BUILD_DIR            e.g. bench/scaling.sh build
#
# Needs BUILD_DIR/bin/pstrain-launch and the role binaries it starts. Environment knobs:
#   SCALING_EPOCHS       epochs per run (default 2)
#   SCALING_BATCH        per-worker batch (default 64)
#   SCALING_TRAIN_LIMIT  use only the first N training samples (default 0: all 60000)
#   SCALING_SERVERS      server counts (default "1 2")
#   SCALING_WORKERS      worker counts (default "1 2 4"; the ratio column needs 1 among them)
# Each run's summary JSON and log are kept in a temporary folder whose name is printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_launcher "$0" "$1"
EPOCHS="${SCALING_EPOCHS:-2}"
BATCH="${SCALING_BATCH:-64}"
TRAIN_LIMIT="${SCALING_TRAIN_LIMIT:-0}"
SERVERS="${SCALING_SERVERS:-1 2}"
WORKERS="${SCALING_WORKERS:-1 2 4}"
OUT="$(mktemp -d -t pstrain-scaling.XXXXXX)"

echo "### (e) Scaling: workers x servers (SYNC)"
echo
print_machine
echo
echo "Each run: \`pstrain-launch --servers=S --workers=W --mode=sync --epochs=$EPOCHS --batch_size=$BATCH"\
     "--train_limit=$TRAIN_LIMIT --eval_last_epoch_only\` (train_limit 0 = all 60000 samples), MLP"\
     "784-256-128-10, Adam; every role is a process on this machine."
echo "Samples/s (job): the summary's figure, start-up to the end of the final evaluation."
echo "Training samples/s: global batch / mean step time (compute + push + wait + pull, from the"\
     "summary's step_time_ms), which leaves start-up and evaluation out; vs 1 worker compares it"\
     "with the 1-worker run on the same servers."
echo "Bytes: each server's counters (request and response messages of Pull/Push/PushPull), mean over"\
     "servers; MiB/s over the span from a server's first request to its last answer. MiB/step ="\
     "(in + out) / the server's steps, the workers' first pulls included; expected = workers x 2 x 4"\
     "bytes x the server's floats (float32 gradient up, weights down, headers aside)."
echo

for S in $SERVERS; do
  for W in $WORKERS; do
    NAME="s$S-w$W"
    "$LAUNCH" --servers="$S" --workers="$W" --mode=sync --epochs="$EPOCHS" --batch_size="$BATCH" \
      --train_limit="$TRAIN_LIMIT" --eval_last_epoch_only --summary_json="$OUT/$NAME.json" \
      > "$OUT/$NAME.log" 2>&1 || echo "$?" > "$OUT/$NAME.failed"
  done
done

python3 "$HERE/report.py" scaling "$OUT" "$BATCH"
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Raw outputs: $OUT"
