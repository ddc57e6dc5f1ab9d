"""pstrain: be a worker of a pstrain parameter-server job from Python.

The job is described and started by pstrain-scheduler or pstrain-launch; a Python process joins it
as a worker and trains on the servers' weights:

    import pstrain
    member = pstrain.join()                # --scheduler=HOST:PORT or PSTRAIN_SCHEDULER
    member.declare_model(names, shapes, initial_values, train_samples, test_samples)
    member.start()
    session = member.new_session(names, shapes)
    while True:
        work = session.next()              # 'train', 'evaluate' or 'done'
        ...

Models with embedding tables declare them too (declare_model(..., tables=[{"name": "user", "dim":
16}])) and, in each step, pull the rows of the batch's keys (session.pull_rows, rows, row_gradient;
unique_keys de-duplicates them). CtrReader reads Criteo and libsvm files as the C++ worker does, and
a ScoreHistogram of predictions, given to report_evaluation, gets the job a test AUC.

A trained model is read outside the job from an export (read_export) or from pstrain-serve while it
trains (ServeClient(address, **security_options()).lookup(table, keys)).

This package needs only NumPy: the protocol is the C++ worker library (pstrain._core). For
PyTorch models, use pstrain.torch, which does all of the above for a torch.nn.Module.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence, TypedDict

from pstrain._core import (  # noqa: F401  (re-exported)
    AbortedError,
    CtrReader,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    InvalidArgumentError,
    Member,
    ScoreHistogram,
    ServeClient,
    Session,
    UnavailableError,
    Work,
    count_records,
    find_ctr_file,
    read_export,
    unique_keys,
)
from pstrain._version import __version__  # noqa: F401
from pstrain.model_file import read_model_file, write_model_file  # noqa: F401

__all__ = [
    "AbortedError", "CtrReader", "DeadlineExceededError", "Error", "FailedPreconditionError", "InvalidArgumentError",
    "Member", "ScoreHistogram", "SecurityOptions", "ServeClient", "Session", "UnavailableError", "Work",
    "__version__", "count_records", "find_ctr_file", "join", "read_export", "read_model_file", "scheduler_address",
    "security_options",
    "unique_keys", "write_model_file",
]


def scheduler_address(argv: Sequence[str] | None = None) -> str:
    """The scheduler's host:port: --scheduler=ADDR (or --scheduler ADDR) in argv, else the
    environment's PSTRAIN_SCHEDULER. argv is left as it is, for the script's own parser."""
    argv = sys.argv[1:] if argv is None else argv
    for i, arg in enumerate(argv):
        if arg.startswith("--scheduler="):
            return arg.split("=", 1)[1]
        if arg == "--scheduler" and i + 1 < len(argv):
            return argv[i + 1]
    address = os.environ.get("PSTRAIN_SCHEDULER", "")
    if not address:
        raise InvalidArgumentError(
            "no scheduler: pass --scheduler=HOST:PORT or set PSTRAIN_SCHEDULER "
            "(pstrain-launch --worker_cmd sets it for the workers it starts)")
    return address


class SecurityOptions(TypedDict):
    """What security_options returns: Member.join's keyword arguments of transport security."""

    tls_cert: str
    tls_key: str
    tls_ca: str
    tls_server_name: str
    job_token_file: str
    insecure: bool


def _flag(argv: Sequence[str], name: str) -> str:
    """--name=value in argv (the last one; a bare --insecure is "true"), else PSTRAIN_<NAME>, else ''."""
    value = os.environ.get("PSTRAIN_" + name.upper(), "")
    for arg in argv:
        if arg.startswith("--" + name + "="):
            value = arg.split("=", 1)[1]
        elif arg == "--" + name and name == "insecure":
            value = "true"
    return value


def security_options(argv: Sequence[str] | None = None) -> SecurityOptions:
    """The transport security a worker script uses, as keyword arguments of Member.join:
    --tls_cert, --tls_key, --tls_ca, --tls_server_name, --job_token_file and --insecure in argv
    (--name=value), else the environment's PSTRAIN_TLS_CERT etc. (pstrain-launch sets them)."""
    argv = sys.argv[1:] if argv is None else argv
    return SecurityOptions(tls_cert=_flag(argv, "tls_cert"), tls_key=_flag(argv, "tls_key"),
                           tls_ca=_flag(argv, "tls_ca"), tls_server_name=_flag(argv, "tls_server_name"),
                           job_token_file=_flag(argv, "job_token_file"),
                           insecure=_flag(argv, "insecure").lower() in ("1", "true", "yes"))


def join(scheduler: str | None = None, rpc_timeout_s: float = 60.0, startup_timeout_s: float = 120.0,
         tcp_connections: int = 2, health_port: int | None = None, metrics_port: int | None = None) -> Member:
    """Registers this process as a worker of the job at `scheduler` (default: scheduler_address())
    and returns its Member (rank, job). Blocks until the scheduler answers.

    health_port: serve gRPC health checking (grpc.health.v1.Health) there, SERVING while the
    worker is in the job, as pstrain-worker --health_port does (Kubernetes probes); default the
    environment's PSTRAIN_HEALTH_PORT, else none. PSTRAIN_HEALTH_HOST sets the address (0.0.0.0).
    metrics_port: serve the worker's Prometheus metrics at /metrics there, as pstrain-worker
    --metrics_port does (-1: any free port); default the environment's PSTRAIN_METRICS_PORT
    (pstrain-launch sets it), else none. PSTRAIN_METRICS_HOST sets the address (0.0.0.0), and
    PSTRAIN_ADVERTISE_HOST the host the scheduler lists it at when that is a wildcard (127.0.0.1)."""
    if health_port is None:
        health_port = int(os.environ.get("PSTRAIN_HEALTH_PORT", "0") or 0)
    health_host = os.environ.get("PSTRAIN_HEALTH_HOST", "0.0.0.0")
    if metrics_port is None:
        metrics_port = int(os.environ.get("PSTRAIN_METRICS_PORT", "0") or 0)
    metrics_host = os.environ.get("PSTRAIN_METRICS_HOST", "0.0.0.0")
    return Member.join(scheduler or scheduler_address(), rpc_timeout_s, startup_timeout_s, tcp_connections,
                       health_host, health_port, **security_options(), metrics_host=metrics_host,
                       metrics_port=metrics_port,
                       metrics_advertise_host=os.environ.get("PSTRAIN_ADVERTISE_HOST", ""))
