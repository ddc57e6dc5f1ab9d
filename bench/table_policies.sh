#!/usr/bin/env bash
# Table policies against the baseline (every key a row, no row leaves): the rows a CTR job's tables hold, their memory, the test AUC
# and the training speed with admission (and, as they land, eviction) on, each policy run beside
# the baseline in the same invocation and alternated, so that the ratios compare runs on the same
# machine at the same time.
#
#   bench/table_policies.sh BUILD_DIR            e.g. bench/table_policies.sh build
#
# The data: pstrain-gen-ctr with 1M training records whose 26 fields draw from 10^9 distinct values
# with Zipf exponent 1.0 (a long tail of keys seen once, as in Criteo: about 9.6 new keys a record).
# The job: `pstrain-launch --model=ctr --servers=2 --workers=2 --mode=sync --epochs=1`, batch 1024
# per worker, once per policy and round.
#
# Environment knobs:
#   POLICIES_DATA_DIR   data to train on (default: generated as above into a temporary folder,
#                       removed at the end)
#   POLICIES_TRAIN      training records to generate (default 1000000)
#   POLICIES_LIST       the policies besides the baseline (every key a row, none leaves), separated
#                       by ";", each the job flags that make it (default
#                       "--table_admission=count:2;--table_ttl_updates=100")
#   POLICIES_ROUNDS     rounds of (always, each policy) (default 2)
# Summaries, logs and memory samples are kept in a temporary folder whose name is printed at the end.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" pstrain-gen-ctr
TRAIN="${POLICIES_TRAIN:-1000000}"
IFS=';' read -r -a POLICIES <<< "${POLICIES_LIST:---table_admission=count:2;--table_ttl_updates=100}"
ROUNDS="${POLICIES_ROUNDS:-2}"
OUT="$(mktemp -d -t pstrain-table-policies.XXXXXX)"
ctr_data_or_generate "$0" "${POLICIES_DATA_DIR:-}" --train_samples="$TRAIN" --unique_keys=1000000000 --zipf=1.0

echo "### Table policies against the baseline"
echo
print_machine
echo
echo "Data: $GEN."
echo "Job: \`pstrain-launch --model=ctr --servers=2 --workers=2 --mode=sync --batch_size=1024 --epochs=1\`"\
     "and each policy's flags; $ROUNDS rounds of (baseline$(printf '; %s' "${POLICIES[@]}")), alternated."
echo

# run NAME FLAGS: one job, its summary in $OUT/NAME.json, the servers' peak RSS in $OUT/NAME.rss.
run() {
  local name="$1" policy="$2"
  local -a flags
  read -r -a flags <<< "$policy"
  "$LAUNCH" --model=ctr --data_dir="$DATA" --servers=2 --workers=2 --mode=sync --batch_size=1024 --epochs=1 \
    "${flags[@]}" --summary_json="$OUT/$name.json" > "$OUT/$name.log" 2>&1 &
  local job=$! peak=0 kib p
  while kill -0 "$job" 2> /dev/null; do
    for p in $(pgrep -P "$job" -x pstrain-server || true); do
      kib="$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2> /dev/null || true)"
      [[ -n "$kib" && "$kib" -gt "$peak" ]] && peak="$kib"
    done
    sleep 1
  done
  wait "$job" || { echo "$0: the $policy job failed, see $OUT/$name.log" >&2; exit 1; }
  echo "$peak" > "$OUT/$name.rss"
}

for ((r = 1; r <= ROUNDS; r++)); do
  run "p0-$r" ""
  for i in "${!POLICIES[@]}"; do run "p$((i + 1))-$r" "${POLICIES[$i]}"; done
done

/usr/bin/python3 - "$OUT" "$ROUNDS" "baseline" "${POLICIES[@]}" <<'EOF'
import json, statistics, sys
out, rounds, policies = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(policy, r):
    name = f"p{policies.index(policy)}-{r}"
    s = json.load(open(f"{out}/{name}.json"))
    t = s["embedding_tables"]
    return {"rows": t["rows"], "bytes": t["bytes"], "refused": t.get("refused", 0), "evicted": t.get("evicted", 0),
            "auc": s["final_test_auc"], "sps": s["samples_per_second"],
            "rss": int(open(f"{out}/{name}.rss").read()) / 1024}
runs = {p: [load(p, r) for r in range(1, rounds + 1)] for p in policies}
med = lambda p, k: statistics.median(x[k] for x in runs[p])
print("| policy | rows | MiB | updates dropped | rows evicted | test AUC | samples/s | peak server RSS (MiB) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for p in policies:
    for r, x in enumerate(runs[p], 1):
        print(f"| {p} (round {r}) | {x['rows']:,} | {x['bytes'] / 2**20:.1f} | {x['refused']:,} | {x['evicted']:,} | {x['auc']:.4f} "
              f"| {x['sps']:,.0f} | {x['rss']:.0f} |")
print()
print("Medians over the rounds, against the baseline:")
print()
print("| policy | rows | MiB | test AUC (difference) | samples/s | peak server RSS |")
print("|---|---:|---:|---:|---:|---:|")
for p in policies[1:]:
    b = "baseline"
    print(f"| {p} | {med(p, 'rows') / med(b, 'rows'):.3f}x | {med(p, 'bytes') / med(b, 'bytes'):.3f}x "
          f"| {med(p, 'auc') - med(b, 'auc'):+.4f} | {med(p, 'sps') / med(b, 'sps'):.3f}x "
          f"| {med(p, 'rss') / med(b, 'rss'):.3f}x |")
EOF
echo
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "Raw outputs: $OUT"
