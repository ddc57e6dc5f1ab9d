#!/usr/bin/env python3
"""python_client_test: a Python client plays the only worker of a real pstrain job.

Why: the wire protocol is proto/*.proto and nothing else. This test holds the C++ side to that: a
client built from the .proto files alone (protoc --python_out, grpcio, protobuf; see
pstrain_client.py) registers, pulls, pushes and finishes a job against a real pstrain-scheduler
and pstrain-server, and checks every float the server sends back. If the C++ side ever puts
bytes on the wire that are not the messages of proto/ps.proto, or reads tensor payloads as
anything but little-endian float32, this fails.

  driver ──start──> pstrain-scheduler (1 server, 1 worker, sync, SGD lr 0.5, constant schedule)
         ──start──> pstrain-server (registers itself)
  client ──Register / GetClusterView / Heartbeat / Barrier──> scheduler
  client ──Pull(0), PushPull(0), bad PushPulls, Pull(1)──> server
  client ──Pull(rows of keys), PushPull(row gradients), bad sparse pushes──> server (embedding
         table "user", declared in the job's textproto; proto/ps.proto SparseRows)
  client ──LeaseWork(eval) / ReportProgress(done)──> scheduler; both processes exit 0

Exit status: 0 passed, 1 failed (with both processes' output), 77 skipped (no grpc or protobuf
module for this interpreter).
"""

import argparse
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

try:
    import grpc
    import google.protobuf  # noqa: F401 (only checked for)
except ImportError as e:
    print("python_client_test: skipped, %s (install python3-grpcio and python3-protobuf)" % e)
    sys.exit(77)

sys.dont_write_bytecode = True  # Leave no __pycache__ in the source tree.
import pstrain_client as pc  # noqa: E402 (after the skip check)

LR = 0.5  # A power of two: lr * g is exact, so the expected update is one float32 rounding.
TRAIN_LIMIT, TEST_LIMIT, BATCH = 256, 64, 256  # One sync step per epoch, one epoch: a tiny job.
MAX_CHUNK_BYTES = 65536  # Splits fc1.weight into many chunks, so chunk order matters.


class Failure(Exception):
    pass


def check(condition, what):
    if not condition:
        raise Failure(what)


def gradient(flat_index):
    """A deterministic, never-zero gradient element, exact in float32, that differs between
    neighbours, so a payload decoded one element off, or with the wrong byte order, shows."""
    return ((flat_index % 13) * 2 - 13) / 64.0


def expect_rpc_error(call, request, code, fragments):
    """Calls and expects `code` with a message that contains every fragment."""
    try:
        call(request)
    except grpc.RpcError as e:
        check(e.code() == code, "expected %s, got %s: %s" % (code, e.code(), e.details()))
        for f in fragments:
            check(f in e.details(), "error %r does not mention %r" % (e.details(), f))
        return e.details()
    raise Failure("a bad push was accepted; expected %s mentioning %s" % (code, fragments))


class Processes:
    """The scheduler and server this test starts; `stop` always kills whatever still runs."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.children = []

    def start(self, name, argv):
        log = open(os.path.join(self.workdir, name + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.children.append((name, p, log))
        return p

    def stop(self):
        for _, p, log in self.children:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()

    def dump(self):
        for name, p, _ in self.children:
            with open(os.path.join(self.workdir, name + ".log"), errors="replace") as f:
                print("----- %s (exit status %s) -----\n%s" % (name, p.poll(), f.read()))


TABLE_DIM = 4  # The job's embedding table "user" (id 0): rows of 4 floats, plain SGD at LR.


def start_cluster(procs, bin_dir):
    """Starts the scheduler on a free port (it writes the port it got) and a server; returns the
    scheduler's address. The job declares one embedding table, which only this client uses."""
    port_file = os.path.join(procs.workdir, "scheduler.port")
    config = os.path.join(procs.workdir, "job.textproto")
    with open(config, "w") as f:
        f.write('tables { name: "user" dim: %d optimizer { type: SGD lr: %g } }\n' % (TABLE_DIM, LR))
    scheduler = procs.start("scheduler", [
        os.path.join(bin_dir, "pstrain-scheduler"), "--host=127.0.0.1", "--port=0", "--port_file=" + port_file,
        "--config=" + config,
        "--servers=1", "--workers=1", "--mode=sync", "--epochs=1", "--batch_size=%d" % BATCH,
        "--train_limit=%d" % TRAIN_LIMIT, "--test_limit=%d" % TEST_LIMIT, "--max_chunk_bytes=%d" % MAX_CHUNK_BYTES,
        "--optimizer=sgd", "--lr=%g" % LR, "--lr_schedule=constant", "--warmup_steps=0", "--weight_decay=0",
        "--heartbeat_ms=200"])
    deadline = time.monotonic() + 15
    port = ""
    while not port:
        check(scheduler.poll() is None, "pstrain-scheduler exited early")
        check(time.monotonic() < deadline, "pstrain-scheduler wrote no port file within 15 s")
        time.sleep(0.05)
        if os.path.exists(port_file):
            port = open(port_file).read().strip()
    address = "127.0.0.1:" + port
    procs.start("server", [os.path.join(bin_dir, "pstrain-server"), "--scheduler=" + address,
                           "--host=127.0.0.1", "--port=0"])
    return address


def check_job(job, pb):
    """The job is the one the expected weights below assume: plain SGD, lr 0.5, no decay or schedule."""
    opt, J = job.optimizer, pb.job_pb2
    check(opt.type == J.OptimizerSpec.SGD, "optimizer %s, expected SGD" % opt.type)
    check(opt.lr == LR, "lr %r, expected %r" % (opt.lr, LR))
    check(opt.weight_decay == 0, "weight_decay %r, expected 0" % opt.weight_decay)
    check(opt.schedule.type == J.LrSchedule.CONSTANT and opt.schedule.warmup_steps == 0,
          "schedule %s, expected CONSTANT without warm-up" % opt.schedule)
    check(job.mode == J.SYNC and job.num_workers == 1 and job.num_servers == 1, "job %s" % job)


def check_chunks(response, expected, what):
    """The answer holds exactly the expected chunks, in order, each with 4 * length bytes."""
    got = [(c.tensor_id, c.offset, c.length) for c in response.chunks]
    want = [(c.tensor_id, c.offset, c.length) for c in expected]
    check(got == want, "%s: chunk headers %s, expected the shard map's %s" % (what, got[:5], want[:5]))
    for c in response.chunks:
        check(len(c.data) == 4 * c.length, "%s: tensor %d offset %d: %d bytes for %d floats"
              % (what, c.tensor_id, c.offset, len(c.data), c.length))


def check_initial_weights(response, tensors, pb):
    """Initial values obey their TensorSpec.init (proto/cluster.proto): zeros are zeros, uniform
    draws lie within their bound and are not all zero. Garbled payloads would not."""
    C = pb.cluster_pb2
    for c in response.chunks:
        t = tensors[c.tensor_id]
        values = pc.bytes_to_floats(c.data)
        check(all(math.isfinite(v) for v in values), "%s: non-finite initial weight" % t.name)
        if t.init == C.ZEROS:
            check(all(v == 0.0 for v in values), "%s: init ZEROS but not all zero" % t.name)
            continue
        fan = t.fan_in if t.init == C.HE_UNIFORM else t.fan_in + t.fan_out
        bound = math.sqrt(6.0 / fan) * (1 + 1e-6)
        check(all(abs(v) <= bound for v in values), "%s: initial weight beyond +-%g" % (t.name, bound))
        check(any(v != 0.0 for v in values), "%s: uniform init but all zero" % t.name)


def make_push(pb, rank, view, step, request_id, chunks, tensors, fp16=False):
    """A whole (not partial) push of gradient() for every chunk the server owns, in shard-map order;
    with fp16, compressed to IEEE half precision (TensorChunk.encoding FLOAT16, 2 bytes a value)."""
    push = pb.ps_pb2.PushRequest(worker_rank=rank, membership_epoch=view.membership_epoch, step=step,
                                 data_epoch=0, num_samples=BATCH, request_id=request_id)
    for c in chunks:
        base = tensors[c.tensor_id].flat_offset + c.offset
        values = [gradient(base + j) for j in range(c.length)]
        if fp16:
            push.chunks.add(tensor_id=c.tensor_id, offset=c.offset, length=c.length,
                            encoding=pb.ps_pb2.FLOAT16, data=struct.pack("<%de" % len(values), *values))
        else:
            push.chunks.add(tensor_id=c.tensor_id, offset=c.offset, length=c.length,
                            data=pc.floats_to_bytes(values))
    return push


def check_sgd_step(before, after, tensors):
    """Every returned weight is float32(w - lr * g): the server decoded every gradient byte exactly.

    lr * g is exact (lr is a power of two) and the subtraction is rounded once to float32, so the
    only slack needed is for that one rounding; a misread element misses by at least lr / 64.
    """
    bad, n = [], 0
    for b, a in zip(before.chunks, after.chunks):
        base = tensors[b.tensor_id].flat_offset + b.offset
        w, got = pc.bytes_to_floats(b.data), pc.bytes_to_floats(a.data)
        step = [LR * gradient(base + j) for j in range(b.length)]
        want = pc.bytes_to_floats(pc.floats_to_bytes(w[j] - step[j] for j in range(b.length)))
        for j in range(b.length):
            if abs(got[j] - want[j]) > 1e-6 * (abs(w[j]) + abs(step[j])):
                bad.append("%s[%d]: %r, expected %r" % (tensors[b.tensor_id].name, b.offset + j, got[j], want[j]))
        n += b.length
    check(not bad, "%d of %d weights wrong after one SGD step, e.g. %s" % (len(bad), n, bad[:3]))
    return n


def keys_bytes(keys):
    return struct.pack("<%dQ" % len(keys), *keys)


def row_gradient(key, element):
    """A multiple of 1/8 (exact in float32 and after lr * g) that differs per key and element."""
    return ((key * 5 + element * 3) % 13 - 6) / 8.0


def sparse_push(pb, rank, view, step, request_id, keys, rows=None, table_id=0, pull_keys=None):
    """A push of no dense gradient (an empty list of chunks is not a valid push, so every chunk
    carries zeros) and row gradients of `keys` (rows: flat floats; default row_gradient)."""
    P = pb.ps_pb2
    push = P.PushRequest(worker_rank=rank, membership_epoch=view.membership_epoch, step=step, data_epoch=0,
                         num_samples=BATCH, request_id=request_id)
    for c in pc.chunks_of_server(view, view.servers[0].rank):
        push.chunks.add(tensor_id=c.tensor_id, offset=c.offset, length=c.length, data=b"\0" * (4 * c.length))
    if rows is None:
        rows = [row_gradient(k, e) for k in keys for e in range(TABLE_DIM)]
    push.sparse.add(table_id=table_id, keys=keys_bytes(keys), rows=pc.floats_to_bytes(rows))
    if pull_keys is not None:
        push.pull_sparse.add(table_id=0, keys=keys_bytes(pull_keys))
    return push


def pull_rows(server, pb, rank, view, step, keys):
    P = pb.ps_pb2
    req = P.PullRequest(worker_rank=rank, membership_epoch=view.membership_epoch, step=step, rows_only=True)
    req.sparse.add(table_id=0, keys=keys_bytes(keys))
    resp = server.pull(req)
    check(len(resp.chunks) == 0, "a rows_only pull answered %d dense chunks" % len(resp.chunks))
    check(len(resp.sparse) == 1 and resp.sparse[0].keys == keys_bytes(keys), "rows answered for other keys")
    return pc.bytes_to_floats(resp.sparse[0].rows)


def check_sparse(server, pb, rank, view, step):
    """Embedding rows over the same wire: pull the rows of some keys, push their gradients with a
    PushPull that also asks for the rows after the update, and check every float; then every kind
    of malformed sparse push is refused with a precise message and changes nothing. Returns the
    step after, and the messages."""
    keys = [3, 17, 40, 1 << 63]
    before = pull_rows(server, pb, rank, view, step, keys)
    check(len(before) == len(keys) * TABLE_DIM, "%d row floats for %d keys" % (len(before), len(keys)))
    check(all(abs(v) <= 0.5 + 1e-7 for v in before), "initial rows outside [-1/sqrt(dim), 1/sqrt(dim)]")
    answer = server.push_pull(sparse_push(pb, rank, view, step, 100, keys, pull_keys=keys))
    check(answer.step == step + 1, "sparse PushPull answered step %d" % answer.step)
    check(len(answer.sparse) == 1, "PushPull with pull_sparse answered %d row entries" % len(answer.sparse))
    after = pc.bytes_to_floats(answer.sparse[0].rows)
    want = pc.bytes_to_floats(pc.floats_to_bytes(
        before[i] - LR * row_gradient(keys[i // TABLE_DIM], i % TABLE_DIM) for i in range(len(before))))
    check(after == want, "rows after one SGD step: %s, expected %s" % (after[:4], want[:4]))
    step += 1

    nan_rows = [0.0] * TABLE_DIM
    nan_rows[2] = float("nan")
    cases = [
        ("unsorted keys", sparse_push(pb, rank, view, step, 101, [17, 3]), ["key 3 at position 1", "sorted ascending"]),
        ("repeated keys", sparse_push(pb, rank, view, step, 102, [3, 3]), ["key 3 at position 1", "repeats"]),
        ("short rows", sparse_push(pb, rank, view, step, 103, [3], rows=[0.5] * (TABLE_DIM - 1)),
         ["table 'user'", "expected 1 keys x dim %d" % TABLE_DIM]),
        ("NaN gradient", sparse_push(pb, rank, view, step, 104, [3], rows=nan_rows),
         ["key 3", "element 2", "nan"]),
        ("unknown table", sparse_push(pb, rank, view, step, 105, [3], table_id=7), ["names table 7", "[0, 1)"]),
    ]
    messages = []
    for what, push, fragments in cases:
        messages.append("%s: %s" % (what, expect_rpc_error(server.push_pull, push, grpc.StatusCode.INVALID_ARGUMENT,
                                                           fragments)))
    check(pull_rows(server, pb, rank, view, step, keys) == after, "a refused sparse push changed the rows")
    return step, messages


GARBAGE = b"\xff\xff\xff\xff\x0f\x08"  # a field number beyond protobuf's range: no message parses


def check_garbage(scheduler_address, server_address, pb, session):
    """Sends GARBAGE to every method of the Scheduler and ParameterServer services, as the
    registered worker (`session`, so that it is the bytes that are refused, not the caller);
    returns one error message per service (scheduler: "<Method> request: not a valid <type>"; the
    server's tensor methods: where the bytes stopped making sense)."""
    examples = []
    for address, module, service in ((scheduler_address, pb.scheduler_pb2, "Scheduler"),
                                      (server_address, pb.ps_pb2, "ParameterServer")):
        descriptor = module.DESCRIPTOR.services_by_name[service]
        with grpc.insecure_channel(address) as channel:
            for method in descriptor.methods:
                call = channel.unary_unary("/%s/%s" % (descriptor.full_name, method.name),
                                           request_serializer=lambda b: b, response_deserializer=lambda b: b)
                error = expect_rpc_error(lambda r: call(r, timeout=10, metadata=session.metadata()), GARBAGE,
                                         grpc.StatusCode.INVALID_ARGUMENT, [])
                check(len(error) > 10, "%s.%s: garbage refused without a message" % (service, method.name))
        examples.append("%s.%s: %s" % (service, descriptor.methods[-1].name, error))
    return examples


def finish_job(scheduler, pb, rank, total_steps):
    """Ends the job cleanly as a worker does after its last step: it reports that step (the
    scheduler hands out an epoch's evaluation leases only once its training is over), every
    evaluation lease of epoch 0 is reported (with made-up results), then a done report; the
    scheduler then finishes the job."""
    S = pb.scheduler_pb2
    scheduler.report_progress(S.ProgressReport(worker_rank=rank, epoch=0, step=total_steps))
    for _ in range(1000):
        lease = scheduler.lease_work(S.LeaseRequest(worker_rank=rank, epoch=0, eval=True))
        if lease.epoch_done:
            break
        if lease.wait:
            time.sleep(0.05)
            continue
        report = S.ProgressReport(worker_rank=rank, epoch=0, step=total_steps)
        report.evals.add(lease_id=lease.lease_id, samples=lease.end - lease.begin)
        scheduler.report_progress(report)
    scheduler.report_progress(S.ProgressReport(worker_rank=rank, epoch=0, done=True))


def run(args, workdir, procs):
    address = start_cluster(procs, args.bin_dir)
    pb = pc.Protos(args.protoc, args.proto_dir, workdir)
    C, S, P = pb.cluster_pb2, pb.scheduler_pb2, pb.ps_pb2
    scheduler = pc.SchedulerClient(address, pb)

    # 1. Register as a worker, learn the job and, once every role is in, the cluster view.
    reg = scheduler.register(S.RegisterRequest(role=C.WORKER, instance_id="python-client-%d" % os.getpid()))
    rank = reg.rank
    check_job(reg.job, pb)
    # 2. Heartbeat from now on, as a live worker must.
    heart = pc.Heartbeater(scheduler, C.WORKER, rank, reg.heartbeat_ms)
    try:
        view = scheduler.cluster_view(S.GetClusterViewRequest(wait_until_running=True), timeout=30)
        check(view.state == C.RUNNING, "job state %s, expected RUNNING" % view.state)
        check([w.rank for w in view.workers] == [rank], "workers %s, expected only us" % view.workers)
        scheduler.barrier(S.BarrierRequest(name=pc.SERVERS_READY_BARRIER, participants=S.BarrierRequest.ALL,
                                           role=C.WORKER, rank=rank), timeout=30)
        tensors = {t.id: t for t in view.shard_map.tensors}
        server_info = view.servers[0]
        chunks = pc.chunks_of_server(view, server_info.rank)
        check(len(chunks) > len(tensors), "expected tensors split into several chunks, got %d" % len(chunks))
        server = pc.ServerClient(server_info.address, pb, scheduler.session)

        # 3. The weights of step 0: the shard map's chunks, whole, and plausible values.
        pull0 = server.pull(P.PullRequest(worker_rank=rank, membership_epoch=view.membership_epoch, step=0))
        check(pull0.step == 0, "pull of step 0 answered step %d" % pull0.step)
        check_chunks(pull0, chunks, "pull of step 0")
        check_initial_weights(pull0, tensors, pb)

        # 4. One SGD step: the answer must be w - lr * g for every element.
        pushed = server.push_pull(make_push(pb, rank, view, 0, 1, chunks, tensors))
        check(pushed.step == 1, "PushPull of step 0 answered step %d" % pushed.step)
        check_chunks(pushed, chunks, "PushPull of step 0")
        n = check_sgd_step(pull0, pushed, tensors)
        # The same gradient in half precision (every gradient() value is exact in fp16): the
        # server decodes it into the same float32 step.
        half = make_push(pb, rank, view, 1, 4, chunks, tensors, fp16=True)
        check(half.ByteSize() < make_push(pb, rank, view, 1, 4, chunks, tensors).ByteSize() * 0.51,
              "an fp16 push is not half the size of a float32 one")
        pushed_half = server.push_pull(half)
        check(pushed_half.step == 2, "PushPull of step 1 (fp16) answered step %d" % pushed_half.step)
        check_sgd_step(pushed, pushed_half, tensors)
        pushed = pushed_half

        # 5. Bad pushes get precise errors over the same wire and change nothing.
        short = make_push(pb, rank, view, 2, 2, chunks, tensors)
        k = len(chunks) // 2
        short.chunks[k].data = short.chunks[k].data[:-4]
        name = tensors[chunks[k].tensor_id].name
        short_error = expect_rpc_error(server.push_pull, short, grpc.StatusCode.INVALID_ARGUMENT,
                                       ["'%s'" % name, "expected %d" % (4 * chunks[k].length)])
        nan = make_push(pb, rank, view, 2, 3, chunks, tensors)
        k, j = len(chunks) - 1, chunks[-1].length // 2
        values = pc.bytes_to_floats(nan.chunks[k].data)
        values[j] = float("nan")
        nan.chunks[k].data = pc.floats_to_bytes(values)
        nan_error = expect_rpc_error(server.push_pull, nan, grpc.StatusCode.INVALID_ARGUMENT,
                                     ["'%s'" % tensors[chunks[k].tensor_id].name,
                                      "element %d" % (chunks[k].offset + j), "nan"])
        pull1 = server.pull(P.PullRequest(worker_rank=rank, membership_epoch=view.membership_epoch, step=2))
        check(pull1.step == 2, "pull after the bad pushes answered step %d, expected 2" % pull1.step)
        check(pull1.SerializeToString() == pushed.SerializeToString(), "the bad pushes changed the weights")
        # 5b. Bytes that are no message at all, on every method of both services: INVALID_ARGUMENT
        # naming what was expected (never UNIMPLEMENTED, as if the method did not exist), and the
        # weights stay as they were.
        garbage_errors = check_garbage(address, server_info.address, pb, scheduler.session)
        # 5c. A call without the session credential Register gave acts as nobody.
        anonymous = pc.ServerClient(server_info.address, pb, pc.Session())
        session_error = expect_rpc_error(
            anonymous.pull, P.PullRequest(worker_rank=rank, membership_epoch=view.membership_epoch, step=2),
            grpc.StatusCode.UNAUTHENTICATED, ["Pull: no session credential"])
        anonymous.close()
        pull2 = server.pull(P.PullRequest(worker_rank=rank, membership_epoch=view.membership_epoch, step=2))
        check(pull2.SerializeToString() == pushed.SerializeToString(), "garbage requests changed the weights")
        # 6. Embedding rows: pull, push, bad sparse pushes.
        _, sparse_errors = check_sparse(server, pb, rank, view, 2)
        check(heart.error is None, "heartbeat failed: %s" % heart.error)

        # 7. Finish the job; both processes must then exit 0 by themselves.
        finish_job(scheduler, pb, rank, view.total_steps)
    finally:
        heart.stop()
    for name, p, _ in procs.children:
        try:
            code = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            raise Failure("%s still runs 20 s after the job finished" % name)
        check(code == 0, "%s exited %d after the job finished" % (name, code))
    server.close()
    scheduler.close()
    print("python_client_test: %d chunks; all %d weights after each SGD step (float32, then fp16 "
          "gradients) equal float32(w - lr * g)"
          % (len(chunks), n))
    print("  short chunk refused: %s" % short_error)
    print("  NaN refused: %s" % nan_error)
    print("  embedding rows: pulled, one SGD step exact; refused: %s" % "; ".join(sparse_errors))
    print("  garbage on every method refused: %s" % "; ".join(garbage_errors))
    print("  a pull without the session credential refused: %s" % session_error)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin_dir", required=True, help="folder with pstrain-scheduler and pstrain-server")
    parser.add_argument("--protoc", default="protoc", help="protoc to generate the Python modules with")
    parser.add_argument("--proto_dir", required=True, help="the repository's proto/ folder")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="pstrain-python-client-")
    procs = Processes(workdir)
    start = time.monotonic()
    try:
        run(args, workdir, procs)
    except Exception as e:  # Any failure, expected or not, needs the processes' output to explain it.
        if isinstance(e, grpc.RpcError):
            e = "%s: %s" % (e.code(), e.details())
        elif not isinstance(e, Failure):
            traceback.print_exc()
        print("python_client_test: FAILED: %s" % e)
        procs.stop()
        procs.dump()
        return 1
    finally:
        procs.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print("python_client_test: passed in %.1f s" % (time.monotonic() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
