#!/usr/bin/python3
"""End to end: a stuck barrier names who is missing.

Two jobs run with pstrain-launch, each with a scheduler's --http_port:

1. Two workers are Python processes that join the job (they register) and then hang, never reaching
   the barrier every role meets before training ("servers-ready"). After 10 s the scheduler's
   /api/status lists the barrier as stuck, missing exactly both workers; its log names them; its
   /metrics counts one stuck barrier.
2. An async job (2 pstrain-workers, a worker declared dead only after 60 s): one worker is stopped
   with SIGSTOP while it trains. The other finishes the epoch's leases and waits for the stopped
   one: for its lease ("epoch-N-leases") when it stopped mid-lease, at the epoch's barrier
   ("epoch-N-trained") when its last batch had already reached the servers. After 10 s that wait is
   listed as stuck, missing exactly the stopped worker, whose last heartbeat is as old as the stop. The worker is resumed (SIGCONT); the job
   finishes and its run summary keeps the wait, released.
"""

import argparse
import json
import os
import re
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


def worker_pids(parent):
    """The pstrain-worker children of `parent`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline") as f:
                argv0 = f.read().split("\0")[0]
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and argv0.endswith("pstrain-worker"):
            pids.append(int(entry))
    return pids


def unreleased(port):
    for b in status(port).get("stuck_barriers", []):
        if not b["released"]:
            return b
    return None


class Job:
    """pstrain-launch with `flags`, its output in a file; stopped (SIGTERM) on exit."""

    def __init__(self, bin_dir, folder, flags):
        self.port = free_port()
        self.out_path = os.path.join(folder, f"launch-{self.port}.out")
        self.summary_path = os.path.join(folder, f"summary-{self.port}.json")
        self.out = open(self.out_path, "w")
        self.process = subprocess.Popen(
            [os.path.join(bin_dir, "pstrain-launch"), f"--http_port={self.port}",
             f"--summary_json={self.summary_path}", *flags], stdout=self.out, stderr=subprocess.STDOUT)

    def output(self):
        with open(self.out_path) as f:
            return f.read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.out.close()
        if exc[0] is AssertionError:
            print(self.output()[-4000:])


def stopped_worker_holding_a_lease(bin_dir, folder):
    with Job(bin_dir, folder, ["--mode=async", "--epochs=3", "--workers=2", "--dead_after_ms=60000",
                               "--nometrics"]) as job:
        port = job.port
        wait_for("training to start",
                 lambda: status(port)["state"] == "RUNNING" and (status(port)["step"] or 0) > 20, 120)
        pids = wait_for("two workers", lambda: len(worker_pids(job.process.pid)) == 2 and worker_pids(job.process.pid),
                        30)
        os.kill(pids[0], signal.SIGSTOP)
        stopped_at = time.time()
        try:
            barrier = wait_for("a stuck wait in /api/status", lambda: unreleased(port), 60)
            print("stuck:", json.dumps(barrier), flush=True)
            # Stopped in the middle of a lease, it holds the epoch's end up ("epoch-N-leases");
            # stopped after its lease's last batch reached the servers (which complete a lease on
            # their own), the other worker waits for it at the epoch's barrier ("epoch-N-trained").
            assert re.fullmatch(r"epoch-[0-9]+-(leases|trained)", barrier["name"]), barrier
            assert barrier["waiting_seconds"] > 10, barrier
            missing = barrier["missing"]
            assert len(missing) == 1 and missing[0]["role"] == "worker", missing
            rank = missing[0]["rank"]
            age = missing[0]["last_heartbeat_seconds_ago"]
            assert age is not None and 9 <= age <= time.time() - stopped_at + 2, (age, time.time() - stopped_at)
            others = [m for m in status(port)["members"] if m["role"] == "worker" and m["rank"] != rank]
            assert len(others) == 1 and others[0]["last_heartbeat_seconds_ago"] < 3, others
            wait_for("the scheduler's log line", lambda: f"barrier '{barrier['name']}' has waited" in job.output()
                     and f"worker {rank}" in job.output(), 10)
        finally:
            os.kill(pids[0], signal.SIGCONT)
        code = job.process.wait(timeout=180)
        assert code == 0, f"pstrain-launch exited {code}"
        with open(job.summary_path) as f:
            summary = json.load(f)
        assert summary["state"] == "FINISHED", summary["state"]
        kept = [b for b in summary.get("stuck_barriers", []) if b["name"] == barrier["name"]]
        assert len(kept) == 1 and kept[0]["released"], summary.get("stuck_barriers")
        assert [m["rank"] for m in kept[0]["missing"]] == [rank], kept
        print(f"ok: {barrier['name']} waited for the stopped worker {rank}: named in the API, the log and the summary")


# A worker that joins the job and hangs: registered, never at the barrier.
HANG = "import time, pstrain; member = pstrain.join(); print('joined as rank', member.rank, flush=True); time.sleep(600)"


def workers_that_hang(bin_dir, folder):
    with Job(bin_dir, folder, ["--workers=2", f'--worker_cmd=/usr/bin/python3 -c "{HANG}"']) as job:
        port, started = job.port, time.time()
        barrier = wait_for("a stuck barrier in /api/status", lambda: unreleased(port), 90)
        print("stuck:", json.dumps(barrier), flush=True)
        assert barrier["name"] == "servers-ready", barrier
        assert 10 <= barrier["waiting_seconds"] <= time.time() - started, barrier
        missing = barrier["missing"]
        assert sorted((m["role"], m["rank"]) for m in missing) == [("worker", 0), ("worker", 1)], missing
        members = {(m["role"], m["rank"]): m for m in status(port)["members"]}
        for m in missing:
            assert members[("worker", m["rank"])]["state"] == "live", members
        wait_for("the scheduler's log line naming the barrier and the workers",
                 lambda: "barrier 'servers-ready' has waited" in job.output() and "worker 0" in job.output()
                 and "worker 1" in job.output(), 10)
        metrics = status(port)["members"][0]["metrics_address"]
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=2) as r:
            text = r.read().decode()
        assert any(line.startswith("pstrain_scheduler_barriers_stuck") and line.endswith(" 1")
                   for line in text.splitlines()), [l for l in text.splitlines() if "barriers" in l]
        print("ok: servers-ready, stuck on workers 0 and 1, is named in the API, the log and /metrics")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin_dir", required=True)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="pstrain-stuck-barrier-test-")
    failed = 0
    for case in (stopped_worker_holding_a_lease, workers_that_hang):
        if case is workers_that_hang and not os.path.isdir(os.path.join(args.bin_dir, "..", "python", "pstrain")):
            print(f"{case.__name__}: the pstrain Python package is not built: skipped")
            continue
        try:
            case(args.bin_dir, folder)
        except AssertionError as e:
            print(f"FAIL {case.__name__}: {e}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
