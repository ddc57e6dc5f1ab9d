#!/usr/bin/python3
"""End to end: a real Prometheus scrapes every role of a real job.

Starts Debian's `prometheus` on loopback, pointed at the scheduler's service discovery
(/api/targets on its --http_port), then runs a job with pstrain-launch (metrics on for every role).
Once the job is over it asks Prometheus' HTTP API whether every role was scraped, and checks the
scraped counters against the run summary the scheduler wrote: the workers' bytes and samples
within 1%, the servers' bytes against the workers', the final accuracy exactly.

Exits 77 (skipped) when prometheus is not installed.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SKIP = 77
ROLES = {"scheduler": 1, "server": 2, "worker": 2}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


class Prometheus:
    """A Prometheus server on loopback with a throwaway storage folder."""

    def __init__(self, binary, folder, targets_url):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = os.path.join(folder, "prometheus.yml")
        with open(config, "w") as f:
            # honor_labels: the roles' own role/rank labels win over the discovered ones (they agree).
            f.write(
                "global:\n"
                "  scrape_interval: 250ms\n"
                "  scrape_timeout: 200ms\n"
                "scrape_configs:\n"
                "  - job_name: pstrain\n"
                "    honor_labels: true\n"
                "    http_sd_configs:\n"
                f"      - url: {targets_url}\n"
                "        refresh_interval: 1s\n")
        self.log = open(os.path.join(folder, "prometheus.log"), "w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(folder, 'data')}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("prometheus not ready in time")

    def query(self, expr):
        """The instant vector of `expr` now, as a list of (labels, float)."""
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = get_json(url)
        if answer.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {answer}")
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def scalar(self, expr):
        result = self.query(expr)
        if len(result) != 1:
            raise AssertionError(f"{expr}: expected one series, got {result}")
        return result[0][1]

    def active_targets(self):
        return get_json(self.url + "/api/v1/targets?state=active")["data"]["activeTargets"]

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


class Checks:
    def __init__(self):
        self.failures = []

    def expect(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.failures.append(what)

    def near(self, got, want, rel, what):
        ok = want != 0 and abs(got - want) <= rel * abs(want)
        self.expect(ok, f"{what}: {got:.6g} vs {want:.6g} (within {rel:.0%})")


def run_job(args, folder, http_port, prometheus, checks):
    summary_path = os.path.join(folder, "summary.json")
    env = dict(os.environ)
    # Every role keeps /metrics up a little after its work, so the final counts get scraped.
    env["PSTRAIN_METRICS_LINGER_MS"] = "1500"
    out_path = os.path.join(folder, "launch.out")
    with open(out_path, "w") as out:
        launch = subprocess.Popen(
            [os.path.join(args.bin_dir, "pstrain-launch"), f"--http_port={http_port}", f"--epochs={args.epochs}",
             f"--summary_json={summary_path}"], stdout=out, stderr=subprocess.STDOUT, env=env)
        # While it runs: every role becomes a scraped target, healthy.
        seen_up = set()
        deadline = time.time() + args.timeout
        while launch.poll() is None and time.time() < deadline:
            try:
                for t in prometheus.active_targets():
                    if t.get("health") == "up":
                        seen_up.add((t["labels"].get("role"), t["labels"].get("rank")))
            except OSError:
                pass
            time.sleep(0.25)
        if launch.poll() is None:
            launch.kill()
            launch.wait()
            raise RuntimeError(f"the job did not end within {args.timeout} s")
    with open(out_path) as f:
        output = f.read()
    checks.expect(launch.returncode == 0, f"pstrain-launch exits 0 (got {launch.returncode})")
    if launch.returncode != 0:
        print(output[-4000:])
    checks.expect(f"[launch] dashboard http://127.0.0.1:{http_port}/" in output, "the launcher prints the dashboard URL")
    metrics_lines = [l for l in output.splitlines() if l.startswith("[launch] metrics ") and l.endswith("/metrics")]
    checks.expect(len(metrics_lines) == sum(ROLES.values()),
                  f"the launcher prints one metrics URL per role ({len(metrics_lines)} lines)")
    for role, count in ROLES.items():
        got = sorted(rank for r, rank in seen_up if r == role)
        checks.expect(len(got) == count, f"prometheus scraped every {role} while the job ran (ranks {got})")
    with open(summary_path) as f:
        return json.load(f)


def compare(prometheus, summary, checks):
    def total(metric):
        return prometheus.scalar(f"sum(last_over_time({metric}[10m]))")

    workers = summary["workers"]
    checks.expect(summary["state"] == "FINISHED", f"the job finished ({summary['state']})")
    for role, count in ROLES.items():
        up = prometheus.query(f'max_over_time(up{{role="{role}"}}[10m])')
        checks.expect(len(up) == count and all(v == 1 for _, v in up), f"up == 1 for each {role} ({len(up)} series)")

    sent = sum(w["bytes_sent"] for w in workers)
    received = sum(w["bytes_received"] for w in workers)
    checks.near(total("pstrain_worker_sent_bytes_total"), sent, 0.01, "worker bytes sent, scraped vs summary")
    checks.near(total("pstrain_worker_received_bytes_total"), received, 0.01,
                "worker bytes received, scraped vs summary")
    checks.near(total("pstrain_worker_samples_total"), sum(w["samples"] for w in workers), 0.01,
                "worker samples, scraped vs summary")
    # What the workers sent is what the servers received, counted on the other side.
    checks.near(total("pstrain_server_received_bytes_total"), sent, 0.01, "server bytes received vs workers' sent")
    checks.near(total("pstrain_server_sent_bytes_total"), received, 0.01, "server bytes sent vs workers' received")
    servers = summary.get("servers", [])
    checks.expect(len(servers) == ROLES["server"], f"the summary lists {len(servers)} servers")
    if servers:
        checks.near(total("pstrain_server_received_bytes_total"), sum(s["bytes_received"] for s in servers), 0.01,
                    "server bytes received, scraped vs summary")

    accuracy = prometheus.scalar("last_over_time(pstrain_scheduler_test_accuracy[10m])")
    checks.expect(abs(accuracy - summary["final_test_accuracy"]) < 1e-9,
                  f"scheduler test accuracy {accuracy} == summary {summary['final_test_accuracy']}")
    steps = total("pstrain_worker_step_duration_seconds_count")
    checks.expect(steps == summary["step_time_ms"]["steps"],
                  f"worker step histogram count {steps:.0f} == summary steps {summary['step_time_ms']['steps']}")
    requests = total("pstrain_server_request_duration_seconds_count")
    checks.expect(requests > 0, f"server request latency histogram has {requests:.0f} observations")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin_dir", required=True)
    parser.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    if not os.access(args.prometheus, os.X_OK):
        print(f"prometheus not found ({args.prometheus}): skipped")
        return SKIP

    folder = tempfile.mkdtemp(prefix="pstrain-prometheus-test-")
    http_port = free_port()
    prometheus = Prometheus(args.prometheus, folder, f"http://127.0.0.1:{http_port}/api/targets")
    checks = Checks()
    try:
        prometheus.wait_ready()
        summary = run_job(args, folder, http_port, prometheus, checks)
        time.sleep(1)  # the last scrapes land in the head block
        compare(prometheus, summary, checks)
    finally:
        prometheus.stop()
        if not checks.failures:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"kept {folder} (prometheus.log, launch.out, summary.json)")
    if checks.failures:
        print(f"{len(checks.failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
