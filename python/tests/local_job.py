"""Real pstrain processes for the package's tests: a scheduler and servers on 127.0.0.1, or a whole
job through pstrain-launch. Binaries come from PSTRAIN_BIN_DIR (ctest sets it)."""

import json
import os
import subprocess
import sys
import tempfile
import time

BIN_DIR = os.environ.get("PSTRAIN_BIN_DIR", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
EXAMPLES = os.path.join(SOURCE_DIR, "examples", "pytorch")
PYTHON = "/usr/bin/python3"


def _read(path):
    """The file's text, stripped; '' while it does not exist."""
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def binary(name):
    path = os.path.join(BIN_DIR, name)
    if not os.path.exists(path):
        raise RuntimeError(f"{path} not found: set PSTRAIN_BIN_DIR to the build's bin folder")
    return path


class Roles:
    """A scheduler and `servers` servers for a job of `flags`, for test processes that join it as
    workers. A context manager: every process is killed on exit."""

    def __init__(self, flags, servers=1):
        self.dir = tempfile.mkdtemp(prefix="pstrain-pytest-")
        port_file = os.path.join(self.dir, "port")
        self.summary = os.path.join(self.dir, "summary.json")
        self.log = open(os.path.join(self.dir, "roles.log"), "w")
        self.procs = [subprocess.Popen(
            [binary("pstrain-scheduler"), "--host=127.0.0.1", "--port=0", f"--port_file={port_file}",
             f"--summary_json={self.summary}", "--heartbeat_ms=200", "--dead_after_ms=3000", f"--servers={servers}",
             *flags], stdout=self.log, stderr=subprocess.STDOUT)]
        deadline = time.time() + 20
        while not _read(port_file):
            if time.time() > deadline or self.procs[0].poll() is not None:
                raise RuntimeError(f"the scheduler did not start: {self.output()}")
            time.sleep(0.05)
        self.address = f"127.0.0.1:{_read(port_file)}"
        for _ in range(servers):
            self.procs.append(subprocess.Popen(
                [binary("pstrain-server"), f"--scheduler={self.address}", "--host=127.0.0.1", "--port=0"],
                stdout=self.log, stderr=subprocess.STDOUT))

    def output(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.log.close()


def launch(flags, worker_cmd, timeout=300, on_progress=None):
    """Runs pstrain-launch with `flags` and Python workers `worker_cmd`; returns (exit code, output,
    summary dict or None). `on_progress(proc, output_so_far)` is called about every 0.2 s."""
    work = tempfile.mkdtemp(prefix="pstrain-pylaunch-")
    summary = os.path.join(work, "summary.json")
    out_path = os.path.join(work, "out.log")
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [binary("pstrain-launch"), f"--summary_json={summary}", f"--worker_cmd={worker_cmd}", *flags],
            stdout=out, stderr=subprocess.STDOUT, cwd=SOURCE_DIR)
        deadline = time.time() + timeout
        while proc.poll() is None:
            if time.time() > deadline:
                proc.kill()
                proc.wait()
                break
            if on_progress is not None:
                with open(out_path) as f:
                    on_progress(proc, f.read())
            time.sleep(0.2)
    with open(out_path) as f:
        output = f.read()
    result = None
    if os.path.exists(summary):
        with open(summary) as f:
            result = json.load(f)
    return proc.returncode, output, result


def example(name, *args):
    return " ".join([PYTHON, os.path.join(EXAMPLES, name), *args])


sys.path.insert(0, EXAMPLES)  # the examples' data reader
