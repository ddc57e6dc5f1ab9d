#!/usr/bin/python3
"""End to end: a stuck barrier names who is missing.

Runs a job with pstrain-launch whose two workers are Python processes that join the job (they
register) and then hang, never reaching the barrier every role meets before training
("servers-ready"). Once the servers have waited there more than 10 s, the test checks that:
  - the scheduler's /api/status lists the barrier as stuck, missing exactly the two workers, by
    rank, with their last heartbeats;
  - the scheduler's log names the barrier and both workers;
  - the scheduler's metrics count one stuck barrier;
then stops the job.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2) as r:
        return json.load(r)


def wait_for(what, predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# A worker that joins the job and hangs: registered, never at the barrier.
HANG = "import time, pstrain; member = pstrain.join(); print('joined as rank', member.rank, flush=True); time.sleep(600)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin_dir", required=True)
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.bin_dir, "..", "python", "pstrain")):
        print("the pstrain Python package is not built: skipped")
        return 77

    folder = tempfile.mkdtemp(prefix="pstrain-stuck-barrier-test-")
    out_path = os.path.join(folder, "launch.out")
    port = free_port()
    out = open(out_path, "w")
    launch = subprocess.Popen(
        [os.path.join(args.bin_dir, "pstrain-launch"), "--workers=2", f"--http_port={port}",
         f"--summary_json={os.path.join(folder, 'summary.json')}", f'--worker_cmd=/usr/bin/python3 -c "{HANG}"'],
        stdout=out, stderr=subprocess.STDOUT)
    started = time.time()
    try:
        def stuck():
            for b in status(port).get("stuck_barriers", []):
                if not b["released"]:
                    return b
            return None

        barrier = wait_for("a stuck barrier in /api/status", stuck, 90)
        print("stuck:", json.dumps(barrier), flush=True)
        assert barrier["name"] == "servers-ready", barrier
        assert 10 <= barrier["waiting_seconds"] <= time.time() - started, barrier
        missing = barrier["missing"]
        assert sorted((m["role"], m["rank"]) for m in missing) == [("worker", 0), ("worker", 1)], missing
        members = {(m["role"], m["rank"]): m for m in status(port)["members"]}
        for m in missing:
            assert members[("worker", m["rank"])]["state"] == "live", members

        def logged():
            with open(out_path) as f:
                text = f.read()
            return "barrier 'servers-ready' has waited" in text and "worker 0" in text and "worker 1" in text
        wait_for("the scheduler's log line naming the barrier and the workers", logged, 10)

        metrics = status(port)["members"][0]["metrics_address"]
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=2) as r:
            text = r.read().decode()
        assert any(line.startswith("pstrain_scheduler_barriers_stuck") and line.endswith(" 1")
                   for line in text.splitlines()), [l for l in text.splitlines() if "barriers" in l]
        print("ok: the barrier servers-ready, stuck on workers 0 and 1, is named in the API, the log and /metrics")
        return 0
    except AssertionError as e:
        print(f"FAIL: {e}")
        with open(out_path) as f:
            print(f.read()[-4000:])
        return 1
    finally:
        if launch.poll() is None:
            launch.send_signal(signal.SIGTERM)
            try:
                launch.wait(timeout=30)
            except subprocess.TimeoutExpired:
                launch.kill()
        out.close()


if __name__ == "__main__":
    sys.exit(main())
