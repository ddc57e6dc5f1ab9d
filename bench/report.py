#!/usr/bin/env python3
"""Turns the benchmarks' outputs into the Markdown tables of bench/run.sh (standard library only).

  report.py ps JSON [--title T]    ps_bench --benchmark_out JSON -> tables (a) and (a')
  report.py agg JSON               aggregation_bench JSON -> table (b)
  report.py e2e-header NPROC       the header of table (c)
  report.py e2e-row DIR PER_WORKER_BATCH   bench/run.sh's end-to-end runs in DIR -> one row of table (c)
  report.py scaling DIR PER_WORKER_BATCH   bench/scaling.sh's runs in DIR -> the scaling table
  report.py compression DIR KIND...       bench/compression.sh's runs in DIR -> the compression table
  report.py pytorch DIR REPEATS            bench/pytorch.sh's runs in DIR -> the PyTorch worker tables
  report.py sparse JSON                    sparse_bench JSON -> the sparse pull and push tables
  report.py ctr DIR REPEATS NPROC          bench/ctr.sh's runs in DIR -> the CTR end-to-end table
  report.py scale-ctr DIR                  bench/scale_ctr.sh's run in DIR -> bytes per row per server
"""
import glob
import json
import math
import os
import re
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


def cpu_per_gb(by, kind, size):
    r = by.get((kind, size))
    return float(r.get("cpu_s_per_gb", NAN)) if r else NAN


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
    print(f"### (a3) CPU per GB moved, and several connections{suffix}")
    print()
    print("CPU: the process's CPU seconds (both ends, every thread) per 10^9 payload bytes moved (the target")
    print("is <= 0.8). ConnsK: the step sent as K partial PushPulls over K TCP connections (the worker's")
    print("client takes its connections in turn); CallsK: the same K parts over one connection. Ratios")
    print("to the TCP ping-pong.")
    print()
    print("| Payload | CPU s/GB: TCP ping-pong | PushPull | PushPull over unix | PushPull ratio "
          "| Conns1 | Calls2 | Conns2 | Conns4 | Conns2 / Calls2 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        if ("PushPullConns2", s) not in by:
            continue
        tp = gbs(by, "TcpPingPong", s)
        r = lambda kind: fmt(ratio(gbs(by, kind, s), tp), ".2f")
        print(f"| {s} | {fmt(cpu_per_gb(by, 'TcpPingPong', s), '.2f')} | {fmt(cpu_per_gb(by, 'PushPull', s), '.2f')} "
              f"| {fmt(cpu_per_gb(by, 'PushPullUnix', s), '.2f')} | {r('PushPull')} | {r('PushPullConns1')} "
              f"| {r('PushPullCalls2')} | {r('PushPullConns2')} | {r('PushPullConns4')} "
              f"| {fmt(ratio(gbs(by, 'PushPullConns2', s), gbs(by, 'PushPullCalls2', s)), '.2f')} |")
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
    print(f"| Per-worker batch | Global batch | Cluster training samples/s | (whole job) "
          f"| One process, 1 thread | Ratio | Ratio, whole job | One process, {nproc} threads | Ratio "
          f"| Cluster test acc. | One-process test acc. |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def parse_kv(line):
    out = {}
    for part in line.split():
        key, _, value = part.partition("=")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


def median(values):
    values = sorted(v for v in values if not math.isnan(v))
    if not values:
        return NAN
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def load_run(stem):
    """The run summary of pstrain-launch run `stem` (stem.json; stem.failed holds its exit code when
    it failed), or {"failed": why}."""
    if os.path.exists(stem + ".failed"):
        code = open(stem + ".failed").read().strip()
        return {"failed": f"pstrain-launch failed (exit {code}), see {os.path.basename(stem)}.log"}
    try:
        return json.load(open(stem + ".json"))
    except (OSError, ValueError) as e:
        return {"failed": f"no summary ({e.__class__.__name__})"}


def mean_step_ms(summary):
    """A summary's mean step time, compute + push + wait + pull (NaN without steps)."""
    st = summary.get("step_time_ms") or {}
    return sum(float(st.get(k, 0)) for k in ("compute", "push", "wait", "pull")) if st.get("steps") else NAN


def training_sps(summary):
    """Global batch / mean step time: training alone, without the start-up and the final
    evaluation that the whole-job figure includes."""
    step_ms = mean_step_ms(summary)
    global_batch = float((summary.get("job") or {}).get("global_batch") or NAN)
    return global_batch / (step_ms / 1000.0) if step_ms > 0 else NAN


def e2e_row(out_dir, batch):
    """bench/run.sh's repeated runs at one batch: e2e-b{B}-r{i}.json (cluster summaries) and
    local1-b{B}-r{i}.txt / localn-b{B}-r{i}.txt (local_train's last line). Medians over the
    repeats of each figure and of each pair's ratio (the runs of one repeat ran back to back)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(out_dir, f"e2e-b{batch}-r*.json"))):
        rep = path[:-len(".json")].rsplit("-r", 1)[1]
        try:
            summary = json.load(open(path))
        except (OSError, ValueError):
            continue
        read = lambda name: parse_kv(open(os.path.join(out_dir, f"{name}-b{batch}-r{rep}.txt")).read())
        l1, ln = read("local1"), read("localn")
        acc = summary.get("final_test_accuracy")
        rows.append({"train": training_sps(summary), "job": float(summary.get("samples_per_second") or NAN),
                     "l1": l1.get("samples_per_second", NAN), "ln": ln.get("samples_per_second", NAN),
                     "acc": acc if isinstance(acc, (int, float)) else NAN,
                     "lacc": l1.get("test_accuracy", NAN)})
    if not rows:
        print(f"| {batch} | {2 * int(batch)} | **no run finished** | | | | | | | | |")
        return
    m = lambda key: median([r[key] for r in rows])
    mr = lambda a, b: median([ratio(r[a], r[b]) for r in rows])
    print(f"| {batch} | {2 * int(batch)} | {fmt(m('train'), '.0f')} | {fmt(m('job'), '.0f')} | {fmt(m('l1'), '.0f')} "
          f"| {fmt(mr('train', 'l1'), '.2f')} | {fmt(mr('job', 'l1'), '.2f')} | {fmt(m('ln'), '.0f')} "
          f"| {fmt(mr('train', 'ln'), '.2f')} | {fmt(m('acc'), '.4f')} | {fmt(m('lacc'), '.4f')} |")


# The servers' final transport line (server/ps_service.h, FormatTransportCounters), as pstrain-launch
# prefixes it, and the other log lines the scaling table reads.
SERVER_BYTES_RE = re.compile(
    r"\] server (\d+): received (\d+) bytes \([^)]*\) in (\d+) requests, sent (\d+) bytes \([^)]*\) "
    r"in (\d+) responses over ([0-9.]+) s")
SERVER_STEP_RE = re.compile(r"\] server: shard (\d+) ends at step (\d+)")
SERVER_FLOATS_RE = re.compile(r"\] server (\d+): \d+ chunks, (\d+) floats")
MODEL_PARAMS_RE = re.compile(r" (\d+) parameters in \d+ chunks over (\d+) servers")
SCALING_RUN_RE = re.compile(r"s(\d+)-w(\d+)\.log$")
MIB = 1024.0 * 1024.0


def parse_launch_log(path):
    """Per server rank: bytes in/out, active seconds, final step, shard floats; and the model's size."""
    servers, params = {}, None
    with open(path, errors="replace") as f:
        for line in f:
            m = SERVER_BYTES_RE.search(line)
            if m:
                rank = int(m.group(1))
                servers.setdefault(rank, {}).update(
                    bytes_in=int(m.group(2)), requests=int(m.group(3)), bytes_out=int(m.group(4)),
                    responses=int(m.group(5)), seconds=float(m.group(6)))
                continue
            m = SERVER_STEP_RE.search(line)
            if m:
                servers.setdefault(int(m.group(1)), {})["steps"] = int(m.group(2))
                continue
            m = SERVER_FLOATS_RE.search(line)
            if m:
                servers.setdefault(int(m.group(1)), {})["floats"] = int(m.group(2))
                continue
            m = MODEL_PARAMS_RE.search(line)
            if m:
                params = int(m.group(1))
    return servers, params


def mean(values):
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else NAN


def fmt(value, spec):
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def scaling_run(out_dir, servers, workers, batch):
    """One row's figures, or a failure note."""
    stem = os.path.join(out_dir, f"s{servers}-w{workers}")
    summary = load_run(stem)
    if "failed" in summary:
        return summary
    by_rank, params = parse_launch_log(stem + ".log")
    global_batch = workers * batch
    st = summary.get("step_time_ms") or {}
    step_ms = mean_step_ms(summary)
    acc = summary.get("final_test_accuracy")
    row = {
        "global_batch": global_batch,
        "job_sps": float(summary.get("samples_per_second") or NAN),
        "step_ms": step_ms,
        "parts": [float(st.get(k, NAN)) for k in ("compute", "push", "wait", "pull")],
        "train_sps": global_batch / (step_ms / 1000.0) if step_ms > 0 else NAN,
        "acc": acc if isinstance(acc, (int, float)) else NAN,
        "state": summary.get("state", "?"),
    }
    counted = [by_rank.get(r, {}) for r in range(servers)]
    missing = [r for r, c in enumerate(counted) if "bytes_in" not in c]
    row["missing_bytes"] = missing
    in_rates, out_rates, per_step, expected = [], [], [], []
    for c in counted:
        if "bytes_in" not in c:
            continue
        sec = c["seconds"]
        in_rates.append(c["bytes_in"] / MIB / sec if sec > 0 else NAN)
        out_rates.append(c["bytes_out"] / MIB / sec if sec > 0 else NAN)
        steps = c.get("steps", 0)
        per_step.append((c["bytes_in"] + c["bytes_out"]) / steps if steps > 0 else NAN)
        # Each step, every worker pushes this shard's gradient and pulls its weights: 2 x 4 bytes
        # per float (float32, no compression), message headers aside.
        floats = c.get("floats") or (params / servers if params else None)
        expected.append(workers * 2 * 4 * floats if floats else NAN)
    row.update(in_mibs=mean(in_rates), out_mibs=mean(out_rates), bytes_per_step=mean(per_step),
               expected_per_step=mean(expected))
    return row


def scaling_table(out_dir, batch):
    runs = sorted({tuple(int(g) for g in SCALING_RUN_RE.search(p).groups())
                   for p in glob.glob(os.path.join(out_dir, "s*-w*.log")) if SCALING_RUN_RE.search(p)})
    print("| Servers | Workers | Global batch | Samples/s (job) | Training samples/s | vs 1 worker "
          "| Step ms = compute + push + wait + pull | MiB/s in per server | MiB/s out per server "
          "| MiB/step per server | Expected MiB/step | Test acc. |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    base = {}
    for servers, workers in runs:
        r = scaling_run(out_dir, servers, workers, batch)
        if "failed" in r:
            print(f"| {servers} | {workers} | {workers * batch} | **{r['failed']}** | | | | | | | | |")
            continue
        if workers == 1:
            base[servers] = r["train_sps"]
        parts = " + ".join(fmt(p, ".2f") for p in r["parts"])
        missing = f" (no byte line from server {', '.join(map(str, r['missing_bytes']))})" if r["missing_bytes"] else ""
        state = "" if r["state"] == "FINISHED" else f" ({r['state']})"
        print(f"| {servers} | {workers} | {r['global_batch']} | {fmt(r['job_sps'], '.0f')}{state} "
              f"| {fmt(r['train_sps'], '.0f')} | {fmt(ratio(r['train_sps'], base.get(servers, NAN)), '.2f')} "
              f"| {fmt(r['step_ms'], '.2f')} = {parts} "
              f"| {fmt(r['in_mibs'], '.1f')} | {fmt(r['out_mibs'], '.1f')}{missing} "
              f"| {fmt(r['bytes_per_step'] / MIB, '.3f')} | {fmt(r['expected_per_step'] / MIB, '.3f')} "
              f"| {fmt(r['acc'], '.4f')} |")
    print()


def compression_run(out_dir, kind):
    """One compression setting's figures, or a failure note."""
    stem = os.path.join(out_dir, "c-" + kind.replace(":", "_"))
    summary = load_run(stem)
    if "failed" in summary:
        return summary
    by_rank, _ = parse_launch_log(stem + ".log")
    st = summary.get("step_time_ms") or {}
    acc = summary.get("final_test_accuracy")
    return {
        "pushed": sum(c.get("bytes_in", 0) for c in by_rank.values()) if by_rank else NAN,
        "pulled": sum(c.get("bytes_out", 0) for c in by_rank.values()) if by_rank else NAN,
        "steps": max((c.get("steps", 0) for c in by_rank.values()), default=0),
        "push_ms": float(st.get("push", NAN)),
        "train_sps": training_sps(summary),
        "acc": acc if isinstance(acc, (int, float)) else NAN,
    }


def compression_table(out_dir, kinds):
    rows = {kind: compression_run(out_dir, kind) for kind in kinds}
    base = rows.get("none", {})
    print("| --compression | pushed MiB | vs none | pulled MiB | push ms/step | training samples/s | vs none "
          "| test accuracy | vs none |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, r in rows.items():
        if "failed" in r:
            print(f"| {kind} | **{r['failed']}** | | | | | | | |")
            continue
        delta = r["acc"] - base.get("acc", NAN) if "acc" in base else NAN
        print(f"| {kind} | {fmt(r['pushed'] / MIB, '.1f')} | {fmt(ratio(r['pushed'], base.get('pushed', NAN)), '.3f')} "
              f"| {fmt(r['pulled'] / MIB, '.1f')} | {fmt(r['push_ms'], '.2f')} | {fmt(r['train_sps'], '.0f')} "
              f"| {fmt(ratio(r['train_sps'], base.get('train_sps', NAN)), '.2f')} | {fmt(r['acc'], '.4f')} "
              f"| {fmt(delta, '+.4f')} |")
    print()


def pytorch_tables(out_dir, repeats):
    """bench/pytorch.sh: the C++ worker, the PyTorch script through pstrain and under DDP; medians
    of the repeats. Then the PyTorch worker's step split beside the C++ worker's."""
    rows = {}
    for name in ("cpp", "torch", "ddp"):
        runs = [load_run(os.path.join(out_dir, f"{name}-{r}")) for r in range(1, repeats + 1)]
        ok = [run for run in runs if "failed" not in run]
        if not ok:
            rows[name] = {"failed": runs[0]["failed"]}
            continue
        if name == "ddp":
            sps = [float(run["samples_per_second"]) for run in ok]
        else:
            sps = [training_sps(run) for run in ok]
        rows[name] = {"acc": median([float(run["final_test_accuracy"]) for run in ok]), "sps": median(sps),
                      "runs": ok}
    ddp = rows["ddp"].get("sps", NAN)
    labels = {"cpp": "C++ worker (pstrain-worker), pstrain", "torch": "PyTorch script, pstrain",
              "ddp": "PyTorch script, DDP (gloo)"}
    print()
    print("| worker | test accuracy | training samples/s | vs DDP |")
    print("|---|---|---|---|")
    for name in ("cpp", "torch", "ddp"):
        row = rows[name]
        if "failed" in row:
            print(f"| {labels[name]} | failed: {row['failed']} | | |")
            continue
        print(f"| {labels[name]} | {row['acc']:.4f} | {row['sps']:.0f} | {ratio(row['sps'], ddp):.2f}x |")
    print()
    print("Mean step time split (ms, per worker step):")
    print()
    print("| worker | compute | push | wait | pull | overlapped |")
    print("|---|---|---|---|---|---|")
    for name in ("cpp", "torch"):
        if "failed" in rows[name]:
            continue
        st = rows[name]["runs"][0].get("step_time_ms") or {}
        print(f"| {labels[name]} | " + " | ".join(f"{float(st.get(k, NAN)):.2f}" for k in
                                                  ("compute", "push", "wait", "pull", "overlapped")) + " |")


def pytorch_ddp_tables(out_dir, repeats, models):
    """bench/pytorch_ddp.sh: per model, the PyTorch script through pstrain against DDP; medians of
    the repeats (and of each alternating pair's ratio), then where a pstrain step goes."""
    names = {"mlp": "MLP (784-256-128-10)", "cnn": "CNN (fashion_cnn.py)", "cnn_bn": "CNN with BatchNorm and dropout"}
    print()
    print("| model | pstrain samples/s | DDP samples/s | pstrain / DDP | pstrain accuracy | DDP accuracy |")
    print("|---|---:|---:|---:|---:|---:|")
    splits = []
    for model in models:
        pairs, pst_acc, ddp_acc, pst_runs = [], [], [], []
        for r in range(1, repeats + 1):
            run = load_run(os.path.join(out_dir, f"{model}-pstrain-{r}"))
            ddp = load_run(os.path.join(out_dir, f"{model}-ddp-{r}"))
            if "failed" in run or "failed" in ddp:
                print(f"| {names.get(model, model)} | {run.get('failed', '')} | {ddp.get('failed', '')} | | | |")
                continue
            pairs.append((training_sps(run), float(ddp["samples_per_second"])))
            pst_acc.append(float(run["final_test_accuracy"]))
            ddp_acc.append(float(ddp["final_test_accuracy"]))
            pst_runs.append(run)
        if not pairs:
            continue
        ratios = [p / d for p, d in pairs]
        print(f"| {names.get(model, model)} | {median([p for p, _ in pairs]):,.0f} | {median([d for _, d in pairs]):,.0f}"
              f" | {median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {median(pst_acc):.4f} | {median(ddp_acc):.4f} |")
        splits.append((model, pst_runs))
    print()
    print("Where a pstrain worker's step goes (ms, mean over the steps of every repeat):")
    print()
    print("| model | compute | push | wait | pull | overlapped | step |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for model, runs in splits:
        keys = ("compute", "push", "wait", "pull", "overlapped")
        values = {k: median([float((run.get("step_time_ms") or {}).get(k, NAN)) for run in runs]) for k in keys}
        print(f"| {names.get(model, model)} | " + " | ".join(f"{values[k]:.2f}" for k in keys)
              + f" | {median([mean_step_ms(run) for run in runs]):.2f} |")


def load_sparse(path):
    """sparse_bench runs by (kind, keys, dim), medians when repetitions ran, plus failures."""
    by, shapes, failures = {}, [], []
    for r in json.load(open(path))["benchmarks"]:
        if r.get("error_occurred"):
            failures.append(f"{r['name']}: {r.get('error_message')}")
            continue
        if r.get("run_type") == "aggregate" and r.get("aggregate_name") != "median":
            continue
        kind, keys, dim = r["name"].split("/")[:3]
        shape = (int(keys), int(dim))
        by[(kind,) + shape] = r
        if shape not in shapes:
            shapes.append(shape)
    return by, sorted(shapes), failures


def sparse_tables(path):
    by, shapes, failures = load_sparse(path)
    print_failures(failures)
    get = lambda kind, shape, field: float(by[(kind,) + shape].get(field, NAN)) if (kind,) + shape in by else NAN
    for op, table_op, what in (("Pull", "TableRead", "keys up, keys and rows back; EmbeddingTable::Read"),
                               ("Push", "TableApply", "keys and row gradients up, applied (Adagrad) before the "
                                                      "answer; EmbeddingTable::Apply")):
        print(f"#### {op}: {what}")
        print()
        print("| keys | dim | MiB of keys + rows | gRPC Mkeys/s | gRPC GB/s | TCP ping-pong GB/s | table GB/s "
              "| vs ping-pong | vs table | vs ping-pong + table | CPU s/GB: gRPC | ping-pong | table |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for shape in shapes:
            g = get(op, shape, "bytes_per_second") / 1e9
            pp = get(op + "PingPong", shape, "bytes_per_second") / 1e9
            tb = get(table_op, shape, "bytes_per_second") / 1e9
            # The two baselines one after the other: what a server that only read the socket and ran
            # the table, with no other cost, would reach.
            serial = 1 / (1 / pp + 1 / tb) if pp > 0 and tb > 0 else NAN
            mib = get(op, shape, "payload_bytes") / MIB
            print(f"| {shape[0]} | {shape[1]} | {fmt(mib, '.2f')} | {fmt(get(op, shape, 'items_per_second') / 1e6, '.2f')} "
                  f"| {fmt(g, '.3f')} | {fmt(pp, '.2f')} | {fmt(tb, '.2f')} | {fmt(ratio(g, pp), '.2f')} "
                  f"| {fmt(ratio(g, tb), '.2f')} | {fmt(ratio(g, serial), '.2f')} "
                  f"| {fmt(get(op, shape, 'cpu_s_per_gb'), '.2f')} | {fmt(get(op + 'PingPong', shape, 'cpu_s_per_gb'), '.2f')} "
                  f"| {fmt(get(table_op, shape, 'cpu_s_per_gb'), '.2f')} |")
        print()


# A server's tables at shutdown (server/server_runner.cc), as pstrain-launch prefixes it.
SERVER_ROWS_RE = re.compile(r"\] server: shard (\d+): embedding rows .*; (\d+) rows in ([0-9.]+) MiB, "
                            r"([0-9.]+) bytes/row \(floor ([0-9.]+)\)")


def parse_table_rows(path):
    """Per shard: rows, MiB, bytes per row and the floor, from a launch log's servers' last lines."""
    shards = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = SERVER_ROWS_RE.search(line)
            if m:
                shards[int(m.group(1))] = {"rows": int(m.group(2)), "mib": float(m.group(3)),
                                           "bytes_per_row": float(m.group(4)), "floor": float(m.group(5))}
    return shards


def read_cpu_seconds(path):
    """User + system seconds from a bash `time` line "USER SYS REAL" (NaN when missing)."""
    try:
        user, system = open(path).read().split()[:2]
        return float(user) + float(system)
    except (OSError, ValueError):
        return NAN


def ctr_table(out_dir, repeats, nproc):
    """bench/ctr.sh: cluster-r{i}.json/.log against local-t1-r{i}.txt and local-t{nproc}-r{i}.txt."""
    rows = []
    for r in range(1, repeats + 1):
        summary = load_run(os.path.join(out_dir, f"cluster-r{r}"))
        read = lambda name: (parse_kv(open(os.path.join(out_dir, f"{name}-r{r}.txt")).read())
                             if os.path.exists(os.path.join(out_dir, f"{name}-r{r}.txt")) else {})
        l1, ln = read("local-t1"), read(f"local-t{nproc}")
        if "failed" in summary:
            print(f"**repeat {r}: {summary['failed']}**\n")
            continue
        st = summary.get("step_time_ms") or {}
        auc = summary.get("final_test_auc")
        logloss = summary.get("final_test_logloss")
        shards = parse_table_rows(os.path.join(out_dir, f"cluster-r{r}.log"))
        cpu = lambda name: read_cpu_seconds(os.path.join(out_dir, f"{name}-r{r}.time"))
        rows.append({"train": training_sps(summary), "job": float(summary.get("samples_per_second") or NAN),
                     "l1": l1.get("samples_per_second", NAN), "ln": ln.get("samples_per_second", NAN),
                     "auc": auc if isinstance(auc, (int, float)) else NAN,
                     "lauc": l1.get("test_auc", NAN), "lauc_n": ln.get("test_auc", NAN),
                     "logloss": logloss if isinstance(logloss, (int, float)) else NAN,
                     "llogloss": l1.get("test_logloss", NAN),
                     "parts": [float(st.get(k, NAN)) for k in ("compute", "push", "wait", "pull")],
                     "global_batch": float((summary.get("job") or {}).get("global_batch") or NAN),
                     "rows": sum(s["rows"] for s in shards.values()) if shards else NAN,
                     "lrows": l1.get("rows", NAN), "cpu": cpu("cluster"), "lcpu": cpu("local-t1")})
    if not rows:
        print("**no cluster run finished**")
        return
    m = lambda key: median([r[key] for r in rows])
    mr = lambda a, b: median([ratio(r[a], r[b]) for r in rows])
    gb = m("global_batch")
    print(f"| Global batch | Cluster training samples/s | (whole job) | One process, 1 thread | Ratio "
          f"| Ratio, whole job | One process, {nproc} threads | Ratio | Test AUC: cluster | one process "
          f"| Test log loss: cluster | one process | CPU s: cluster | one process, 1 thread | Ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {fmt(gb, '.0f')} | {fmt(m('train'), '.0f')} | {fmt(m('job'), '.0f')} | {fmt(m('l1'), '.0f')} "
          f"| {fmt(mr('train', 'l1'), '.2f')} | {fmt(mr('job', 'l1'), '.2f')} | {fmt(m('ln'), '.0f')} "
          f"| {fmt(mr('train', 'ln'), '.2f')} | {fmt(m('auc'), '.4f')} | {fmt(m('lauc'), '.4f')} "
          f"| {fmt(m('logloss'), '.4f')} | {fmt(m('llogloss'), '.4f')} | {fmt(m('cpu'), '.1f')} "
          f"| {fmt(m('lcpu'), '.1f')} | {fmt(mr('lcpu', 'cpu'), '.2f')} |")
    print()
    parts = [median([r["parts"][i] for r in rows]) for i in range(4)]
    print(f"Cluster step (ms, medians over the repeats of each worker's mean): {fmt(sum(parts), '.2f')} = "
          + " + ".join(f"{fmt(p, '.2f')} {name}" for p, name in zip(parts, ("compute", "push", "wait", "pull")))
          + f". Rows the tables hold at the end: cluster {fmt(m('rows'), '.0f')} (both servers), one process "
          f"{fmt(m('lrows'), '.0f')}. Each repeat's ratio (training, 1 thread): "
          + ", ".join(fmt(ratio(r['train'], r['l1']), '.2f') for r in rows) + ".")
    print()


def scale_ctr_table(out_dir):
    """bench/scale_ctr.sh: each server's rows and bytes per row against the floor, and its peak RSS."""
    summary = load_run(os.path.join(out_dir, "scale"))
    shards = parse_table_rows(os.path.join(out_dir, "scale.log"))
    rss = {}
    rss_path = os.path.join(out_dir, "rss.txt")
    if os.path.exists(rss_path):
        for line in open(rss_path):
            parts = line.split()
            if len(parts) == 2:
                rss[parts[0]] = max(rss.get(parts[0], 0), int(parts[1]))
    if "failed" in summary:
        print(f"**{summary['failed']}**\n")
    print("| Server shard | Rows | MiB (table estimate) | Bytes/row | Floor bytes/row | vs floor |")
    print("|---:|---:|---:|---:|---:|---:|")
    for shard in sorted(shards):
        s = shards[shard]
        print(f"| {shard} | {s['rows']:,} | {s['mib']:.1f} | {s['bytes_per_row']:.1f} | {s['floor']:.1f} "
              f"| {ratio(s['bytes_per_row'], s['floor']):.2f} |")
    total_rows = sum(s["rows"] for s in shards.values())
    total_mib = sum(s["mib"] for s in shards.values())
    print(f"| all | {total_rows:,} | {total_mib:.1f} | {fmt(ratio(total_mib * MIB, total_rows), '.1f')} "
          f"| | |")
    print()
    if rss:
        peaks = sorted(rss.values())
        print("Peak resident memory of the server processes (sampled every 2 s; the tables plus the process "
              "itself, gRPC buffers and the dense shard): "
              + ", ".join(f"{kib / 1024:.0f} MiB" for kib in peaks)
              + (f"; {sum(peaks) * 1024 / total_rows:.1f} bytes per row over both." if total_rows else "."))
        print()
    if "failed" not in summary:
        auc = summary.get("final_test_auc")
        print(f"Job: {fmt(float(summary.get('samples_per_second') or NAN), '.0f')} samples/s over the whole job, "
              f"training {fmt(training_sps(summary), '.0f')} samples/s, test AUC {fmt(auc if isinstance(auc, (int, float)) else NAN, '.4f')}, "
              f"{fmt(float(summary.get('wall_seconds') or NAN), '.0f')} s of wall time.")
        print()


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
        e2e_row(argv[2], argv[3])
    elif cmd == "compression" and len(argv) >= 4:
        compression_table(argv[2], argv[3:])
    elif cmd == "pytorch_ddp" and len(argv) >= 5:
        pytorch_ddp_tables(argv[2], int(argv[3]), argv[4:])
    elif cmd == "pytorch" and len(argv) == 4:
        pytorch_tables(argv[2], int(argv[3]))
    elif cmd == "ctr" and len(argv) == 5:
        ctr_table(argv[2], int(argv[3]), int(argv[4]))
    elif cmd == "scale-ctr" and len(argv) == 3:
        scale_ctr_table(argv[2])
    elif cmd == "sparse" and len(argv) == 3:
        sparse_tables(argv[2])
    elif cmd == "scaling" and len(argv) == 4:
        scaling_table(argv[2], int(argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
