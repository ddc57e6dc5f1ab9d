#!/usr/bin/python3
"""Changing the server count of a running CTR job: the pause, the steps trained again, and the
throughput before and after, measured on one run.

    bench/server_count_change.py BUILD_DIR [--train=400000] [--unique_keys=10000000] [--batch=512]
                                 [--mode=sync|async|ssp]

Generates CTR data with pstrain-gen-ctr, starts a CTR job (SYNC unless --mode says) by hand (scheduler, 2 servers, 2
workers, checkpoints every 25 steps), and once a third of its steps are done asks for 3 servers
(pstrain-ctl scale) and starts a third server; then runs the same job on 3 servers from the start,
for the steady state of 3 servers on this machine. It samples the scheduler's /api/status every 0.25 s
and prints a Markdown table:

- steps/s before the request and after the cut-over (each over a window that leaves out the
  change itself), and their ratio (one run: the same data, machine and load), and the steps/s of
  the job on 3 servers from the start;
- the time from the cut-over to the first step past it (the pause, sampled every 0.25 s), and the
  longest time from the request on without a new step (ASYNC/SSP: the quiet cut's wait for the
  leases out comes before the cut-over);
- the time from the request to the cut-over (the wait for the added server and the next cut);
- per server, how long it served nothing while it restored the cut re-sharded (its log:
  "ms without serving"), and the steps the workers trained again (their logs: "rewinding");
- the rows each server holds at the end.

The folder with the logs is printed at the end. Exit status 0, or 1 when the job or the change
failed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2) as r:
        return json.loads(r.read())


def rate(samples, t0, t1):
    """Steps per second between the samples nearest to t0 and t1."""
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def run_job(bin_dir, data, out, args, grow):
    """Runs the job in `out`; `grow`: asks for 3 servers a third of the way (else runs on 3 from
    the start). Returns (samples, requested, cut_over, total, process names)."""
    os.makedirs(out, exist_ok=True)
    http = free_port()
    port_file = os.path.join(out, "scheduler.port")
    procs = {}

    def spawn(name, argv):
        log = open(os.path.join(out, name + ".log"), "w")
        procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    spawn("scheduler", [f"{bin_dir}/pstrain-scheduler", "--port=0", f"--port_file={port_file}",
                        f"--http_port={http}", "--model=ctr", f"--data_dir={data}",
                        f"--servers={2 if grow else 3}", "--workers=2", f"--mode={args.mode}", f"--batch_size={args.batch}", "--epochs=1", "--eval_last_epoch_only",
                        f"--checkpoint_dir={out}/ckpt", "--checkpoint_every_steps=25", "--full_checkpoint_every=4",
                        f"--summary_json={out}/summary.json"])
    while not os.path.exists(port_file) or not open(port_file).read().strip():
        time.sleep(0.1)
    address = "127.0.0.1:" + open(port_file).read().strip()
    for r in range(2 if grow else 3):
        spawn(f"server{r}", [f"{bin_dir}/pstrain-server", f"--scheduler={address}", "--port=0"])
    for r in range(2):
        spawn(f"worker{r}", [f"{bin_dir}/pstrain-worker", f"--scheduler={address}"])

    samples = []  # (seconds, step)
    requested = cut_over = None
    total = None
    while procs["scheduler"].poll() is None:
        try:
            s = status(http)
        except OSError:
            time.sleep(0.25)
            continue
        now = time.monotonic()
        samples.append((now, s["step"]))
        total = s.get("total_steps") or total
        if grow and requested is None and total and s["step"] >= total // 3:
            answer = subprocess.run([f"{bin_dir}/pstrain-ctl", "scale", f"--scheduler={address}", "--servers=3"],
                                    capture_output=True, text=True)
            if answer.returncode != 0:
                sys.exit(f"{sys.argv[0]}: pstrain-ctl scale failed: {answer.stderr}")
            requested = now
            spawn("server2", [f"{bin_dir}/pstrain-server", f"--scheduler={address}", "--port=0"])
        if requested is not None and cut_over is None and s.get("map_servers") == 3:
            cut_over = now
        time.sleep(0.25)
    for p in procs.values():
        p.wait()

    return samples, requested, cut_over, total, list(procs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build")
    parser.add_argument("--train", type=int, default=400000)
    parser.add_argument("--unique_keys", type=int, default=10000000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--mode", choices=("sync", "async", "ssp"), default="sync")
    args = parser.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    for b in ("pstrain-scheduler", "pstrain-server", "pstrain-worker", "pstrain-ctl", "pstrain-gen-ctr"):
        if not os.access(os.path.join(bin_dir, b), os.X_OK):
            sys.exit(f"{sys.argv[0]}: {bin_dir}/{b} not found; build it first")
    out = tempfile.mkdtemp(prefix="pstrain-server-count-")
    data = os.path.join(out, "data")
    subprocess.run([f"{bin_dir}/pstrain-gen-ctr", f"--out_dir={data}", f"--train_samples={args.train}",
                    "--test_samples=20000", f"--unique_keys={args.unique_keys}", "--zipf=1.0"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples, requested, cut_over, total, names = run_job(bin_dir, data, os.path.join(out, "grow"), args, True)
    if requested is None or cut_over is None:
        print(f"{sys.argv[0]}: the change did not cut over; logs in {out}", file=sys.stderr)
        return 1
    steady, _, _, _, _ = run_job(bin_dir, data, os.path.join(out, "three"), args, False)
    logs = {name: open(os.path.join(out, "grow", name + ".log")).read() for name in names}
    paused = {name: [int(m) for m in re.findall(r"\((\d+) ms without serving", text)]
              for name, text in logs.items() if name.startswith("server")}
    redone = [int(a) - int(b) for name, text in logs.items() if name.startswith("worker")
              for a, b in re.findall(r"rewinding from step (\d+) to step (\d+)", text)]
    rows = {name: re.findall(r"; (\d+) rows in ([0-9.]+ [KMG]iB)", text)[-1:]
            for name, text in logs.items() if name.startswith("server")}
    start = samples[0][0]
    before = rate(samples, start + 2, requested)
    # Until the last step: the evaluation after it makes no steps.
    last = max(s[1] for s in samples)
    trained = next(t for t, step in samples if step == last)
    # From 1 s after training went on past the cut-over (the servers restore the cut first).
    at_cut = next(step for t, step in samples if t >= cut_over)
    resumed = next(t for t, step in samples if t > cut_over and step > at_cut)
    after = rate(samples, resumed + 1, trained)
    paused_s = resumed - cut_over
    # The longest stretch without a new step from the request on (to the last step).
    stalled, since = 0.0, requested
    last_step = next(step for t, step in samples if t >= requested)
    for t, step in samples:
        if t < requested or t > trained:
            continue
        if step != last_step:
            last_step, since = step, t
        stalled = max(stalled, t - since)
    print(f"### Changing the server count of a running {args.mode.upper()} CTR job (2 -> 3 servers)")
    print()
    print(f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores;"
          f" load average {open('/proc/loadavg').read().split()[0]}")
    print(f"- Data: pstrain-gen-ctr --train_samples={args.train} --unique_keys={args.unique_keys} --zipf=1.0;"
          f" job: --model=ctr --mode={args.mode} --batch_size={args.batch} x 2 workers, 1 epoch ({total} steps),"
          " checkpoints every 25 steps (a base every 4)")
    print(f"- Command: bench/server_count_change.py BUILD_DIR --train={args.train}"
          f" --unique_keys={args.unique_keys} --batch={args.batch} --mode={args.mode}")
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| steps/s on 2 servers, before the request | {before:.2f} |")
    print(f"| steps/s on 3 servers, from 1 s after training went on to the last step | {after:.2f} |")
    print(f"| after / before | {after / before:.2f} |")
    three_start = steady[0][0]
    three_last = max(x[1] for x in steady)
    three = rate(steady, three_start + 2, next(t for t, step in steady if step == three_last))
    print(f"| steps/s of the same job on 3 servers from the start (a second run) | {three:.2f} |")
    print(f"| request to cut-over (the added server's start, then the next cut) | {cut_over - requested:.2f} s |")
    print(f"| cut-over to the first step past it (sampled every 0.25 s) | {paused_s:.2f} s |")
    print(f"| longest time without a new step, from the request on | {stalled:.2f} s |")
    for name in sorted(paused):
        print(f"| {name}: served nothing while restoring the re-cut cut | {', '.join(map(str, paused[name])) or '-'} ms |")
    print(f"| steps trained again by the workers (from the cut to the cut-over) |"
          f" {', '.join(map(str, redone)) or 'none (they were at the cut)'} |")
    for name in sorted(rows):
        if rows[name]:
            print(f"| {name}: rows at the end | {rows[name][0][0]} ({rows[name][0][1]}) |")
    print()
    print(f"Logs: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
