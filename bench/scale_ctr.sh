#!/usr/bin/env bash
# Embedding tables at scale: a CTR job whose tables end with over 20M rows of 16 floats (Adagrad),
# trained by 2 servers x 2 workers, and what each server's rows cost in memory against the floor
# (the weights and the optimizer's state alone: 16 x 4 x 2 = 128 bytes a row).
#
#   bench/scale_ctr.sh BUILD_DIR            e.g. bench/scale_ctr.sh build
#
# The data: pstrain-gen-ctr with 3M training records whose 26 fields draw from 10^9 distinct values
# (38M per field) with Zipf exponent 1.0 instead of the default 1.1, so that the long tail holds
# many keys seen once or a few times, as Criteo's does (its 45M records hold 33M distinct values).
# Expected distinct keys over the training file: about 25M (rows are created by the first update
# of a key, so that is the tables' size after one epoch; test-only keys are read, never created).
# The servers' last log lines give the exact count and EmbeddingTable::bytes_used() per row; the
# script also samples each server process's resident memory every 2 s.
#
# Environment knobs:
#   SCALE_DATA_DIR     data to train on (default: generated as above into a temporary folder,
#                      about 0.8 GB, removed at the end)
#   SCALE_TRAIN        training records to generate (default 3000000)
#   SCALE_UNIQUE_KEYS  --unique_keys (default 1000000000)
#   SCALE_ZIPF         --zipf (default 1.0)
#   SCALE_BATCH        per-worker batch (default 1024)
# The summary, the job's log and the memory samples are kept in a temporary folder whose name is
# printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" pstrain-gen-ctr
TRAIN="${SCALE_TRAIN:-3000000}"
UNIQUE="${SCALE_UNIQUE_KEYS:-1000000000}"
ZIPF="${SCALE_ZIPF:-1.0}"
BATCH="${SCALE_BATCH:-1024}"
OUT="$(mktemp -d -t pstrain-scale-ctr.XXXXXX)"
ctr_data_or_generate "$0" "${SCALE_DATA_DIR:-}" --train_samples="$TRAIN" --unique_keys="$UNIQUE" --zipf="$ZIPF"

echo "### (i) Embedding tables at scale: bytes per row on each server"
echo
print_machine
echo
echo "Data: $GEN."
echo "Job: \`pstrain-launch --model=ctr --servers=2 --workers=2 --mode=sync --batch_size=$BATCH --epochs=1\`"\
     "(26 tables of dim 16, Adagrad: floor 16 x 4 x (1 + 1) = 128 bytes a row). Rows and bytes: each server's"\
     "last log line (EmbeddingTable::bytes_used(): the row blocks, the block list and the hash map's slots"\
     "and control bytes). Resident memory: VmRSS of each pstrain-server process, sampled every 2 s."
echo
"$LAUNCH" --model=ctr --data_dir="$DATA" --servers=2 --workers=2 --mode=sync --batch_size="$BATCH" --epochs=1 \
  --summary_json="$OUT/scale.json" > "$OUT/scale.log" 2>&1 &
JOB=$!
while kill -0 "$JOB" 2> /dev/null; do
  for p in $(pgrep -P "$JOB" -x pstrain-server || true); do
    kib="$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2> /dev/null || true)"
    [[ -n "$kib" ]] && echo "$p $kib" >> "$OUT/rss.txt"
  done
  sleep 2
done
wait "$JOB" || echo "$?" > "$OUT/scale.failed"
python3 "$HERE/report.py" scale-ctr "$OUT"
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Raw outputs: $OUT"
