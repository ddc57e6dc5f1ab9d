#!/usr/bin/python3
"""How fresh pstrain-serve's answers are while a CTR job trains (docs/performance.md, Serving).

    scripts/serve-freshness.py BUILD_DIR [--train_samples=400000] [--unique_keys=1000000]
        [--every=10] [--full_every=20] [--poll_ms=100]

Generates CTR data with pstrain-gen-ctr, starts pstrain-serve following a checkpoint folder, runs a
sync job of 2 servers x 2 workers (pstrain-launch) that cuts every --every steps (a base every
--full_every cuts), then reads the timestamps of both logs:
  written   when the last server wrote cut N (its log: "wrote checkpoint ... (step N")
  served    when pstrain-serve began answering from cut N (its log: "serving step N")
and prints, over the cuts served, percentiles of
  visible   served(N) - written(N): from the cut on disk to answers from it
  freshness served(N) - written(previous cut): the age, when it is first answered from, of the
            oldest update a cut holds (an update applied just after the previous cut), which
            bounds the delay from any row's update on a server to pstrain-serve answering with it
and the job's training samples/s.
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

GLOG = re.compile(r"[IWE](\d{8}) (\d\d:\d\d:\d\d\.\d{6})")


def stamp(line):
    m = GLOG.search(line)
    if not m:
        return None
    return datetime.datetime.strptime(m.group(1) + " " + m.group(2), "%Y%m%d %H:%M:%S.%f").timestamp()


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--train_samples", type=int, default=400000)
    parser.add_argument("--unique_keys", type=int, default=1000000)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--full_every", type=int, default=20)
    parser.add_argument("--poll_ms", type=int, default=100)
    args = parser.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    work = tempfile.mkdtemp(prefix="serve-freshness-")
    try:
        data, ckpt = os.path.join(work, "data"), os.path.join(work, "ckpt")
        os.makedirs(ckpt)
        subprocess.run([f"{bin_dir}/pstrain-gen-ctr", f"--out_dir={data}", f"--train_samples={args.train_samples}",
                        "--test_samples=2000", f"--unique_keys={args.unique_keys}"], check=True,
                       stdout=subprocess.DEVNULL)
        serve_log = open(os.path.join(work, "serve.log"), "w")
        serve = subprocess.Popen([f"{bin_dir}/pstrain-serve", f"--checkpoint_dir={ckpt}", f"--poll_ms={args.poll_ms}"],
                                 stdout=serve_log, stderr=subprocess.STDOUT)
        summary = os.path.join(work, "summary.json")
        start = time.time()
        job = subprocess.run([f"{bin_dir}/pstrain-launch", "--model=ctr", f"--data_dir={data}", "--epochs=1",
                              f"--checkpoint_dir={ckpt}", f"--checkpoint_every_steps={args.every}",
                              f"--full_checkpoint_every={args.full_every}", f"--summary_json={summary}"],
                             capture_output=True, text=True)
        wall = time.time() - start
        time.sleep(2)
        serve.terminate()
        serve.wait(timeout=10)
        serve_log.close()
        if job.returncode != 0:
            sys.exit(f"serve-freshness: the job failed:\n{job.stdout[-3000:]}{job.stderr[-3000:]}")
        written = {}
        for line in (job.stdout + job.stderr).splitlines():
            m = re.search(r"wrote checkpoint .*\(step (\d+)", line)
            t = stamp(line)
            if m and t is not None:
                step = int(m.group(1))
                written[step] = max(written.get(step, 0), t)
        served = {}
        last_line = ""
        for line in open(os.path.join(work, "serve.log")):
            m = re.search(r"serving step (\d+):", line)
            if m:
                last_line = line.strip()
            t = stamp(line)
            if m and t is not None:
                served.setdefault(int(m.group(1)), t)
        cuts = sorted(written)
        visible, fresh = [], []
        for step, t in served.items():
            if step not in written:
                continue
            visible.append(t - written[step])
            earlier = [c for c in cuts if c < step]
            if earlier:
                fresh.append(t - written[earlier[-1]])
        if not fresh:
            sys.exit("serve-freshness: no cut was both written and served; see " + work)
        rate = None
        m = re.search(r'"samples_per_second":\s*([0-9.]+)', open(summary).read()) if os.path.exists(summary) else None
        if m:
            rate = float(m.group(1))
        print(f"serve-freshness: {args.train_samples} records, {args.unique_keys} keys, a cut every {args.every} "
              f"steps (a base every {args.full_every}), poll {args.poll_ms} ms; {len(cuts)} cuts written, "
              f"{len(served)} served; job {wall:.1f} s" + (f", {rate:.0f} samples/s" if rate else ""))
        print("serve-freshness: the last version: " + last_line[last_line.find("serving step"):])
        print("| seconds | p50 | p99 | max |\n|---|---|---|---|")
        for name, values in (("visible: cut written -> served", visible),
                             ("freshness: update -> served (bound)", fresh)):
            print(f"| {name} | {percentile(values, 0.5):.3f} | {percentile(values, 0.99):.3f} | {max(values):.3f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
