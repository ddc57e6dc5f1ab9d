#!/usr/bin/env python3
"""Turns the benchmarks' outputs into the Markdown tables of bench/run.sh (standard library only).

  report.py ps JSON [--title T]    ps_bench --benchmark_out JSON -> tables (a) and (a')
  report.py agg JSON               aggregation_bench JSON -> table (b)
  report.py e2e-header NPROC       the header of table (c)
  report.py e2e-row SUMMARY_JSON PER_WORKER_BATCH LOCAL_1_THREAD_LINE LOCAL_N_THREADS_LINE
"""
import json
import math
import sys

NAN = float("nan")
TIME_SCALE_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def load_medians(path):
    """Benchmark runs by (kind, size label); medians when repetitions ran, plus failures."""
    runs = json.load(open(path))["benchmarks"]
    by, sizes, failures = {}, [], []
    for r in runs:
        if r.get("error_occurred"):
            failures.append(f"{r['name']}: {r.get('error_message')}")
            continue
        if r.get("run_type") == "aggregate" and r.get("aggregate_name") != "median":
            continue
        kind, size = r["name"].split("/")[:2]
        by[(kind, size)] = r
        if size not in sizes:
            sizes.append(size)
    return by, sizes, failures


def gbs(by, kind, size):
    r = by.get((kind, size))
    return r["bytes_per_second"] / 1e9 if r else NAN


def latency_us(by, kind, size):
    r = by.get((kind, size))
    return r["real_time"] * TIME_SCALE_US[r["time_unit"]] if r else NAN


def ratio(a, b):
    return a / b if b and not math.isnan(b) else NAN


def print_failures(failures):
    for f in failures:
        print(f"**failed: {f}**\n")


def ps_tables(path, title):
    by, sizes, failures = load_medians(path)
    print_failures(failures)
    suffix = f" ({title})" if title else ""
    print(f"### (a) gRPC round trip: PushPull vs Echo{suffix}")
    print()
    print("Server on 127.0.0.1 in the benchmark's process, 1 worker, SYNC, SGD; medians of 3 runs.")
    print("Both move N bytes each way per call; GB/s counts both directions (2N per call).")
    print("Ratio = PushPull GB/s / Echo GB/s.")
    print()
    print("| Payload | Echo GB/s | PushPull GB/s | Ratio | Echo latency (us) | PushPull latency (us) |")
    print("|---|---:|---:|---:|---:|---:|")
    for s in sizes:
        e, p = gbs(by, "Echo", s), gbs(by, "PushPull", s)
        print(f"| {s} | {e:.3f} | {p:.3f} | {ratio(p, e):.2f} "
              f"| {latency_us(by, 'Echo', s):.0f} | {latency_us(by, 'PushPull', s):.0f} |")
    print()
    print(f"### (a2) PushPull vs a plain socket ping-pong{suffix}")
    print()
    print("The ceiling of one connection: blocking read/write of N bytes each way, nothing else")
    print("(bench/socket_pingpong.h), over TCP on 127.0.0.1 and over a unix domain socket; PushPull")
    print("over the same transport. Ratio = PushPull GB/s / ping-pong GB/s (the target is >= 0.9).")
    print()
    print("| Payload | TCP ping-pong GB/s | PushPull GB/s | Ratio | unix ping-pong GB/s "
          "| PushPull over unix GB/s | Ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        tp, p = gbs(by, "TcpPingPong", s), gbs(by, "PushPull", s)
        up, pu = gbs(by, "UnixPingPong", s), gbs(by, "PushPullUnix", s)
        print(f"| {s} | {tp:.2f} | {p:.2f} | {ratio(p, tp):.2f} | {up:.2f} | {pu:.2f} | {ratio(pu, up):.2f} |")
    print()
    print(f"### (a') One way: Push vs Send, Pull vs Fetch{suffix}")
    print()
    print("ASYNC, SGD. Push: N bytes of gradient up, applied before the answer. Pull: N bytes of")
    print("weights down. Send / Fetch: the echo service moving N bytes one way. Ratio = PS / echo GB/s.")
    print()
    print("| Payload | Send GB/s | Push GB/s | Ratio | Push latency (us) "
          "| Fetch GB/s | Pull GB/s | Ratio | Pull latency (us) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        se, pu = gbs(by, "Send", s), gbs(by, "Push", s)
        fe, pl = gbs(by, "Fetch", s), gbs(by, "Pull", s)
        print(f"| {s} | {se:.3f} | {pu:.3f} | {ratio(pu, se):.2f} | {latency_us(by, 'Push', s):.0f} "
              f"| {fe:.3f} | {pl:.3f} | {ratio(pl, fe):.2f} | {latency_us(by, 'Pull', s):.0f} |")
    print()


AGG_LABELS = {
    "Memcpy": "memcpy of one gradient",
    "WeightedSum": "weighted sum of 2 gradients (float_ops)",
    "SyncStepSgd": "SYNC step via ParameterStore, 2 workers, SGD",
    "SyncStepAdam": "SYNC step via ParameterStore, 2 workers, Adam",
}


def agg_table(path):
    by, sizes, failures = load_medians(path)
    print_failures(failures)
    print("### (b) Server aggregation vs memcpy")
    print()
    print("Medians of 3 runs. GB/s counts gradient bytes taken in: 4N for memcpy, 2 x 4N for the")
    print("others (two workers). Ratio = GB/s / memcpy GB/s at the same N. A SYNC step is two")
    print("ParameterStore::Push calls (no gRPC): non-finite check, copy-in, weighted sum, optimizer.")
    print()
    print("| Gradient | Operation | Time per op (us) | GB/s | vs memcpy |")
    print("|---|---|---:|---:|---:|")
    for s in sizes:
        base = gbs(by, "Memcpy", s)
        for kind, label in AGG_LABELS.items():
            if (kind, s) not in by:
                continue
            g = gbs(by, kind, s)
            print(f"| {s} floats | {label} | {latency_us(by, kind, s):.0f} | {g:.2f} | {ratio(g, base):.2f} |")
    print()


def e2e_header(nproc):
    print(f"| Per-worker batch | Global batch | Cluster samples/s | Local samples/s (1 thread) | Ratio "
          f"| Local samples/s ({nproc} threads) | Ratio | Cluster test acc. | Local test acc. |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def parse_kv(line):
    out = {}
    for part in line.split():
        key, _, value = part.partition("=")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


def e2e_row(summary_path, batch, local1, localn):
    summary = json.load(open(summary_path))
    cluster = float(summary.get("samples_per_second") or NAN)
    acc = summary.get("final_test_accuracy")
    acc = f"{acc:.4f}" if isinstance(acc, (int, float)) else "n/a"
    l1, ln = parse_kv(local1), parse_kv(localn)
    s1, sn = l1.get("samples_per_second", NAN), ln.get("samples_per_second", NAN)
    print(f"| {batch} | {2 * int(batch)} | {cluster:.0f} | {s1:.0f} | {ratio(cluster, s1):.2f} "
          f"| {sn:.0f} | {ratio(cluster, sn):.2f} | {acc} | {l1.get('test_accuracy', NAN):.4f} |")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd = argv[1]
    if cmd == "ps":
        title = argv[4] if len(argv) > 4 and argv[3] == "--title" else ""
        ps_tables(argv[2], title)
    elif cmd == "agg":
        agg_table(argv[2])
    elif cmd == "e2e-header":
        e2e_header(argv[2])
    elif cmd == "e2e-row":
        e2e_row(argv[2], argv[3], argv[4], argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
