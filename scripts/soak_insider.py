"""The insiders of scripts/soak.sh: until the process --until_pid exits, holders of a worker's
certificate and the job token register as new workers, each with a session of its own, and try
what an independent probe once got through (issue 24), every one of which the job must refuse or
bound:

  final-model      SubmitFinalModel with a one-tensor file                 (must be refused)
  future-eval      LeaseWork(eval) for a later epoch and a far one          (must hand out nothing)
  fake-progress    ReportProgress claiming 10^9 samples                     (must be refused)
  barrier-spam     Barrier with a 1 MB name and with a made-up name          (must be refused)
  server-register  Register as a server at server 0's address               (must be refused)
  fail-the-job     ReportFailure for its own rank: it leaves, the job runs on (job must stay RUNNING)
  stall            every fourth insider heartbeats and never pushes         (must be evicted)
  slowloris        200 idle HTTP connections to the dashboard for 10 s     (polls must be answered)

Prints what each attack got and "accepted N": attacks that succeeded, which must be 0. The job's
model must be unchanged (soak.sh compares it with an undisturbed run's): an insider never pushes,
so every step the servers apply is the honest workers', split as without it. Debian's python3 with
python3-grpcio and python3-protobuf; the messages come from proto/ through protoc (as
tests/py_client does)."""

import argparse
import collections
import os
import socket
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py_client"))
from pstrain_client import Protos  # noqa: E402 (the path above)
from soak_attacker import alive, read  # noqa: E402 (beside this file)


class Insider:
    """One holder of a worker's files, over its own TLS channel to the scheduler."""

    def __init__(self, p, job_dir, port):
        self.p = p
        credentials = grpc.ssl_channel_credentials(root_certificates=read(os.path.join(job_dir, "ca.pem")),
                                                   private_key=read(os.path.join(job_dir, "worker-key.pem")),
                                                   certificate_chain=read(os.path.join(job_dir, "worker.pem")))
        self.channel = grpc.secure_channel("127.0.0.1:%d" % port, credentials,
                                           [("grpc.ssl_target_name_override", "pstrain"),
                                            ("grpc.use_local_subchannel_pool", 1),
                                            ("grpc.max_send_message_length", -1)])
        self.token = read(os.path.join(job_dir, "token")).decode().strip()
        self.session = None
        self.rank = None

    def close(self):
        self.channel.close()

    def call(self, method, request, response_type, timeout=5):
        metadata = [("authorization", "Bearer " + self.token)]
        if self.session:
            metadata.append(("pstrain-session", self.session))
        rpc = self.channel.unary_unary("/pstrain.Scheduler/" + method,
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=response_type.FromString)
        return rpc(request, timeout=timeout, metadata=metadata)

    def register(self, role, address=""):
        s = self.p.scheduler_pb2
        answer = self.call("Register", s.RegisterRequest(role=role, address=address,
                                                         instance_id="insider-%d-%f" % (os.getpid(), time.time())),
                           s.RegisterResponse)
        self.session, self.rank = answer.session_credential, answer.rank
        return answer


def refused(fn):
    """True when the call fails with a status (what a refusal is)."""
    try:
        fn()
        return False
    except grpc.RpcError:
        return True


def job_state(p, insider):
    return insider.call("GetJobStatus", p.scheduler_pb2.JobStatusRequest(), p.scheduler_pb2.JobStatus)


def one_insider(p, args, stall, tally):
    s, c = p.scheduler_pb2, p.cluster_pb2
    insider = Insider(p, args.job_dir, args.port)
    try:
        view = insider.call("GetClusterView", s.GetClusterViewRequest(), c.ClusterView)
        status = job_state(p, insider)
        if status.state != c.RUNNING:
            return
        try:
            insider.register(c.WORKER)
        except grpc.RpcError as e:  # max_workers reached, or the job ended: nothing to try
            tally["register-refused " + e.code().name] += 1
            return
        rank = insider.rank
        if stall:
            # Heartbeats, never pushes: it must be evicted once it holds the others up (a heartbeat
            # then answers "no longer a member"). Should nothing wait for it (the job between steps
            # at its end), the job's step must still move on without it.
            start, step = time.time(), status.step
            while time.time() - start < args.stall_limit_s and alive(args.until_pid):
                try:
                    beat = insider.call("Heartbeat", s.HeartbeatRequest(role=c.WORKER, rank=rank),
                                        s.HeartbeatResponse)
                except grpc.RpcError:
                    tally["stall evicted"] += 1
                    tally["stall evicted after s (sum)"] += round(time.time() - start)
                    return
                if beat.state != c.RUNNING:
                    return  # The job ended meanwhile: nothing to judge.
                time.sleep(0.2)
            if alive(args.until_pid) and job_state(p, insider).step == step:
                tally["stall ACCEPTED (the job stood still)"] += 1
            else:
                tally["stall not waited for (the job went on)"] += 1
            return
        ok = collections.OrderedDict()
        ok["final-model"] = refused(lambda: insider.call(
            "SubmitFinalModel", s.FinalModel(worker_rank=rank, model_file=ONE_TENSOR_MODEL), s.FinalModelAck))
        epoch = status.epoch
        handed = []
        for e in (epoch + 1, 1000):
            try:
                lease = insider.call("LeaseWork", s.LeaseRequest(worker_rank=rank, epoch=e, eval=True,
                                                                  request_seq=e), s.LeaseResponse)
                handed.append(lease.end > lease.begin)
            except grpc.RpcError:
                handed.append(False)
        ok["future-eval"] = not any(handed)
        ok["fake-progress"] = refused(lambda: insider.call(
            "ReportProgress", s.ProgressReport(worker_rank=rank, epoch=epoch, step=1,
                                               train=s.TrainStats(loss_sum=1.0, samples=10 ** 9, steps=1)),
            s.ProgressResponse))
        ok["barrier-spam"] = refused(lambda: insider.call(
            "Barrier", s.BarrierRequest(name="b" * (1 << 20), participants=s.BarrierRequest.WORKERS,
                                        role=c.WORKER, rank=rank), s.BarrierResponse, timeout=2)) and \
            refused(lambda: insider.call(
                "Barrier", s.BarrierRequest(name="made-up-%d" % rank, participants=s.BarrierRequest.WORKERS,
                                            role=c.WORKER, rank=rank), s.BarrierResponse, timeout=2))
        # Leaves through ReportFailure; the job must go on.
        try:
            insider.call("ReportFailure", s.FailureReport(role=c.WORKER, rank=rank, message="insider leaves"),
                         s.FailureResponse)
        except grpc.RpcError:
            pass
        after = job_state(p, insider)
        ok["fail-the-job"] = after.state != c.FAILED
        # With a worker's files, registering a server at server 0's address.
        server_address = view.servers[0].address if len(view.servers) else "127.0.0.1:1"
        other = Insider(p, args.job_dir, args.port)
        try:
            ok["server-register"] = refused(lambda: other.register(c.SERVER, server_address))
        finally:
            other.close()
        for name, good in ok.items():
            tally[name + (" refused" if good else " ACCEPTED")] += 1
    finally:
        insider.close()


def slowloris(args, tally):
    """200 connections that send half a request head and go quiet, for 10 s, while polling."""
    conns = []
    for _ in range(200):
        try:
            sock = socket.create_connection(("127.0.0.1", args.http_port), timeout=2)
            sock.sendall(b"GET /api/status HTTP/1.1\r\nHost: x\r\n")
            conns.append(sock)
        except OSError:
            break
    answered = 0
    for _ in range(5):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/api/status" % args.http_port, timeout=2) as r:
                answered += r.status == 200
        except OSError:
            pass
        time.sleep(2)
    for sock in conns:
        sock.close()
    tally["slowloris polls answered"] += answered
    tally["slowloris polls"] += 5


# A model file of one tensor "x" of shape [1]; its bytes do not matter: the call must be refused.
ONE_TENSOR_MODEL = b"PSTRAINM" + b"\x00" * 33


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--job_dir", required=True, help="the job's per-role credentials (make-tls-secret.sh)")
    parser.add_argument("--port", type=int, required=True, help="the scheduler's port on 127.0.0.1")
    parser.add_argument("--http_port", type=int, default=0, help="the dashboard's port (0: no slowloris)")
    parser.add_argument("--until_pid", type=int, required=True)
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--round_s", type=float, default=5.0)
    parser.add_argument("--stall_limit_s", type=float, default=30.0)
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="pstrain-insider-protos.")
    p = Protos(args.protoc, os.path.realpath(os.path.join(HERE, "..", "proto")), out)
    tally = collections.Counter()
    started = time.time()
    rounds = 0
    while alive(args.until_pid):
        try:
            one_insider(p, args, stall=(rounds % 4 == 3), tally=tally)
        except grpc.RpcError as e:  # the scheduler busy or the job ending: try again next round
            tally["round lost " + e.code().name] += 1
        if args.http_port and rounds % 6 == 5 and alive(args.until_pid):
            threading.Thread(target=slowloris, args=(args, tally), daemon=True).start()
        rounds += 1
        time.sleep(args.round_s)
    accepted = sum(n for k, n in tally.items() if "ACCEPTED" in k)
    if tally["slowloris polls"] and tally["slowloris polls answered"] < tally["slowloris polls"]:
        accepted += 1
        tally["slowloris ACCEPTED (a poll went unanswered)"] += 1
    print("insiders: %d rounds in %.0f s" % (rounds, time.time() - started))
    for key in sorted(tally):
        print("  %-40s %d" % (key, tally[key]))
    print("accepted %d" % accepted)


if __name__ == "__main__":
    main()
