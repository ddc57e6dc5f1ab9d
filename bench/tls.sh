#!/usr/bin/env bash
# What transport security costs: push+pull through a real parameter server with mutual TLS and a
# job token (between hosts), and with local credentials and the job token over a unix socket
# (same host), against plaintext (ps_bench's PushPullTls, PushPullUnixSecured, PushPull and
# PushPullUnix, 1 to 64 MiB); and the demo job end to end as pstrain-launch runs it by default
# (same-host workers on unix sockets), with TLS over loopback TCP (--unix_sockets=false), and
# --insecure. Every side runs in one invocation with repetitions interleaved, so a burst of load
# hits all alike; medians.
#
#   bench/tls.sh BUILD_DIR            e.g. bench/tls.sh build
#
# Environment knobs:
#   TLS_REPEATS   end-to-end runs of each side (default 5; ps_bench repeats each benchmark 3 times)
#   TLS_EPOCHS    epochs of each end-to-end run (default 3)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_binaries "$0" "$1" ps_bench
REPEATS="${TLS_REPEATS:-5}"
EPOCHS="${TLS_EPOCHS:-3}"
OUT="$(mktemp -d -t pstrain-tls.XXXXXX)"

echo "### (h) Mutual TLS and the job token against plaintext"
echo
print_machine
echo
"$BIN/ps_bench" --benchmark_filter='^PushPull(Tls|Unix|UnixSecured)?/(1|4|16|64)MiB(/|$)' \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
  --benchmark_out="$OUT/ps_bench.json" --benchmark_out_format=json > "$OUT/ps_bench.txt" 2>&1 ||
  { echo "ps_bench failed:" >&2; tail -20 "$OUT/ps_bench.txt" >&2; exit 1; }

# End to end: the demo job, alternating the default, TLS over TCP and --insecure.
for ((i = 0; i < REPEATS; ++i)); do
  for side in default tls insecure; do
    flags=(--epochs="$EPOCHS" --summary_json="$OUT/$side-$i.json")
    [[ "$side" == tls ]] && flags+=(--unix_sockets=false)
    [[ "$side" == insecure ]] && flags+=(--insecure)
    "$LAUNCH" "${flags[@]}" > "$OUT/$side-$i.log" 2>&1 || { echo "$side run $i failed: see $OUT/$side-$i.log" >&2; exit 1; }
  done
done

/usr/bin/python3 - "$OUT" "$REPEATS" "$EPOCHS" <<'EOF'
import json, statistics, sys

out, repeats, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
medians, reps = {}, 0
for b in json.load(open(f"{out}/ps_bench.json"))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        # "PushPull/1MiB/min_time:0.100/real_time" -> "PushPull/1MiB"
        medians["/".join(b["run_name"].split("/")[:2])] = b["bytes_per_second"] / 1e9
        reps = b.get("repetitions", reps)

print("Push+pull through `worker::PsClient` to one in-process server on 127.0.0.1 (SYNC, 1 worker, SGD:"
      " each call one step, N bytes up and N back; GB/s counts both). TLS: a P-256 certificate signed"
      " by the job's throwaway CA on both ends (gRPC's TLS defaults), and the job token checked on every call."
      f" `ps_bench`, medians of its {reps} interleaved repetitions.")
print()
print("| payload | TCP plaintext GB/s | TCP TLS GB/s | TLS / plaintext | unix plaintext GB/s | unix secured GB/s | secured / plaintext |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for size in ("1MiB", "4MiB", "16MiB", "64MiB"):
    plain, tls = medians.get(f"PushPull/{size}"), medians.get(f"PushPullTls/{size}")
    uplain, usec = medians.get(f"PushPullUnix/{size}"), medians.get(f"PushPullUnixSecured/{size}")
    if plain and tls and uplain and usec:
        print(f"| {size.replace('MiB', ' MiB')} | {plain:.2f} | {tls:.2f} | {tls / plain:.2f}x"
              f" | {uplain:.2f} | {usec:.2f} | {usec / uplain:.2f}x |")
print()

def runs(side):
    values = []
    for i in range(repeats):
        s = json.load(open(f"{out}/{side}-{i}.json"))
        values.append((s["samples_per_second"], s.get("final_test_accuracy", 0.0)))
    return values

sides = {side: runs(side) for side in ("default", "tls", "insecure")}
speed = {side: statistics.median(v[0] for v in values) for side, values in sides.items()}
print(f"End to end: the demo job (`pstrain-launch --epochs={epochs}`: 2 servers, 2 workers, sync MLP on"
      f" Fashion-MNIST), {repeats} runs a side alternating; training samples/s from the run summary, medians.")
print()
print("| run | samples/s | vs --insecure | test accuracy (median) |")
print("|---|---:|---:|---:|")
names = {"default": "secured, same-host unix sockets (the default)",
         "tls": "secured, TLS over loopback TCP (`--unix_sockets=false`)",
         "insecure": "`--insecure`"}
for side in ("default", "tls", "insecure"):
    print(f"| {names[side]} | {speed[side]:,.0f} | {speed[side] / speed['insecure']:.2f}x"
          f" | {statistics.median(v[1] for v in sides[side]):.4f} |")
EOF
echo
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Raw outputs: $OUT"
