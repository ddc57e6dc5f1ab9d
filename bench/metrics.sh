#!/usr/bin/env bash
# What observability costs: the demo job with every role's /metrics and the scheduler's dashboard
# on, scraped every second (15x Prometheus' default interval), against the same job with both off
# (--nometrics --http_port=0). The two sides run alternately in one invocation, so a burst of load
# hits both alike; medians. Also times each scrape of a server while the job trains.
#
#   bench/metrics.sh BUILD_DIR            e.g. bench/metrics.sh build
#
# Environment knobs:
#   METRICS_REPEATS   runs of each side (default 5)
#   METRICS_EPOCHS    epochs of each run (default 3)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
find_launcher "$0" "$1"
REPEATS="${METRICS_REPEATS:-5}"
EPOCHS="${METRICS_EPOCHS:-3}"
OUT="$(mktemp -d -t pstrain-metrics.XXXXXX)"

echo "### (i) Metrics and the dashboard on against off"
echo
print_machine
echo

for ((i = 0; i < REPEATS; ++i)); do
  for side in on off; do
    flags=(--epochs="$EPOCHS" --summary_json="$OUT/$side-$i.json")
    if [[ "$side" == off ]]; then
      flags+=(--nometrics --http_port=0)
      "$LAUNCH" "${flags[@]}" > "$OUT/$side-$i.log" 2>&1 || { echo "$side run $i failed: see $OUT/$side-$i.log" >&2; exit 1; }
    else
      port="$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
      flags+=(--http_port="$port")
      /usr/bin/python3 "$HERE/metrics_scraper.py" "http://127.0.0.1:$port" "$OUT/scrapes-$i.json" &
      scraper=$!
      "$LAUNCH" "${flags[@]}" > "$OUT/$side-$i.log" 2>&1 || { kill "$scraper"; echo "$side run $i failed: see $OUT/$side-$i.log" >&2; exit 1; }
      wait "$scraper"
    fi
  done
done

/usr/bin/python3 - "$OUT" "$REPEATS" "$EPOCHS" <<'EOF'
import json, re, statistics, sys

out, repeats, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# "server 0: received N bytes (..) in R requests, sent M bytes (..) in R responses over T s"
TRAFFIC = re.compile(r"received (\d+) bytes .* sent (\d+) bytes .* over ([0-9.]+) s")

def run(side, i):
    summary = json.load(open(f"{out}/{side}-{i}.json"))
    total_bytes, seconds = 0, []
    for line in open(f"{out}/{side}-{i}.log"):
        m = TRAFFIC.search(line)
        if m:
            total_bytes += int(m.group(1)) + int(m.group(2))
            seconds.append(float(m.group(3)))
    gbps = total_bytes / max(seconds) / 1e9 if seconds else float("nan")
    return summary["samples_per_second"], gbps, summary.get("final_test_accuracy", 0.0)

sides = {side: [run(side, i) for i in range(repeats)] for side in ("on", "off")}
med = {side: [statistics.median(v[k] for v in runs) for k in range(3)] for side, runs in sides.items()}
print(f"The demo job (`pstrain-launch --epochs={epochs}`: 2 servers, 2 workers, sync MLP on Fashion-MNIST),"
      f" {repeats} runs a side alternating. Metrics on: every role serves /metrics, the scheduler its dashboard,"
      " and a scraper reads every role once a second. Push+pull GB/s: both directions through both servers,"
      " from their closing log lines. Medians.")
print()
print("| run | samples/s | vs off | push+pull GB/s | vs off | test accuracy |")
print("|---|---:|---:|---:|---:|---:|")
for side, name in (("on", "metrics + dashboard on"), ("off", "--nometrics --http_port=0")):
    s, g, a = med[side]
    print(f"| {name} | {s:,.0f} | {s / med['off'][0]:.3f}x | {g:.3f} | {g / med['off'][1]:.3f}x | {a:.4f} |")
print()

latencies = {}
for i in range(repeats):
    for role, values in json.load(open(f"{out}/scrapes-{i}.json")).items():
        latencies.setdefault(role, []).extend(values)
print("Scrape latency while the job trains: one HTTP GET of /metrics, from request to the whole body,"
      " milliseconds over every scrape of every run.")
print()
print("| role | scrapes | median ms | p99 ms | max ms | body bytes (median) |")
print("|---|---:|---:|---:|---:|---:|")
for role in sorted(latencies):
    ms = sorted(v[0] * 1e3 for v in latencies[role])
    size = statistics.median(v[1] for v in latencies[role])
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    print(f"| {role} | {len(ms)} | {statistics.median(ms):.2f} | {p99:.2f} | {ms[-1]:.2f} | {size:,.0f} |")
EOF
echo
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Raw outputs: $OUT"
