"""A pstrain worker's side of the wire protocol in Python, built from proto/*.proto alone.

It exists to show (and test) that a client in another language can take part in a job with nothing
but the .proto files, `protoc --python_out`, grpcio and protobuf: no generated gRPC stubs
(grpc_tools), no C++ headers. Methods are called by their full names
('/pstrain.Scheduler/Register'), which is all a gRPC stub does.

Tensor payloads (TensorChunk.data) are raw little-endian float32, `length` floats per chunk,
element `offset` of the tensor first (proto/ps.proto).
"""

import array
import os
import subprocess
import sys
import threading

import grpc

# Every call has a deadline; these are generous because CI machines are slow and shared.
RPC_TIMEOUT_S = 10.0
# The barrier every server and worker enters before training starts (common/barriers.h): servers
# enter it once their shards are initialised, so a pull after it finds the weights.
SERVERS_READY_BARRIER = "servers-ready"


class Protos:
    """The generated message modules (cluster_pb2, job_pb2, scheduler_pb2, ps_pb2) as attributes."""

    def __init__(self, protoc, proto_dir, out_dir):
        """Runs `protoc --python_out=out_dir` on every .proto in proto_dir and imports the result.

        The .proto files import each other as "proto/x.proto", so the include path is proto_dir's
        parent and the modules land in out_dir/proto/. That folder gets an __init__.py and goes first
        on sys.path, so an installed package named `proto` (proto-plus) cannot shadow it.
        """
        root = os.path.dirname(os.path.abspath(proto_dir))
        files = sorted(os.path.join(proto_dir, f) for f in os.listdir(proto_dir) if f.endswith(".proto"))
        subprocess.run([protoc, "--proto_path=" + root, "--python_out=" + out_dir] + files, check=True)
        open(os.path.join(out_dir, "proto", "__init__.py"), "w").close()
        sys.path.insert(0, out_dir)
        from proto import cluster_pb2, job_pb2, ps_pb2, scheduler_pb2  # noqa: E402 (generated above)

        self.cluster_pb2, self.job_pb2 = cluster_pb2, job_pb2
        self.scheduler_pb2, self.ps_pb2 = scheduler_pb2, ps_pb2


def floats_to_bytes(values):
    """Little-endian float32 bytes of `values` (rounded to float32), as TensorChunk.data wants."""
    a = array.array("f", values)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def bytes_to_floats(data):
    """The float32 values of little-endian TensorChunk.data."""
    if len(data) % 4:
        raise ValueError("%d bytes is not a whole number of float32" % len(data))
    a = array.array("f")
    a.frombytes(data)
    if sys.byteorder == "big":
        a.byteswap()
    return a


def _channel(address):
    # Pull answers hold a whole shard; gRPC's default 4 MiB receive limit is too small for big models.
    return grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", -1),
                                                   ("grpc.max_send_message_length", -1)])


class Session:
    """The session credential Register answers (RegisterResponse.session_credential), which every
    later call carries as metadata "pstrain-session": it lets this client act as its rank, and
    only that one."""

    KEY = "pstrain-session"

    def __init__(self):
        self.credential = ""

    def metadata(self):
        return [(Session.KEY, self.credential)] if self.credential else []


def _method(channel, service, name, request_cls, response_cls, session):
    """A callable for one unary method: what a generated stub would hold, made by hand."""
    call = channel.unary_unary("/pstrain.%s/%s" % (service, name),
                               request_serializer=request_cls.SerializeToString,
                               response_deserializer=response_cls.FromString)

    def invoke(request, timeout=RPC_TIMEOUT_S):
        # No wait_for_ready: a peer that is gone should fail the call at once (UNAVAILABLE).
        return call(request, timeout=timeout, metadata=session.metadata())

    return invoke


class SchedulerClient:
    """The Scheduler service (proto/scheduler.proto), the methods a worker uses."""

    def __init__(self, address, pb):
        self.pb = pb
        self.session = Session()
        self._channel = _channel(address)
        s, c = pb.scheduler_pb2, pb.cluster_pb2

        def method(name, request_cls, response_cls):
            return _method(self._channel, "Scheduler", name, request_cls, response_cls, self.session)

        self._register = method("Register", s.RegisterRequest, s.RegisterResponse)
        self.cluster_view = method("GetClusterView", s.GetClusterViewRequest, c.ClusterView)
        self.heartbeat = method("Heartbeat", s.HeartbeatRequest, s.HeartbeatResponse)
        self.barrier = method("Barrier", s.BarrierRequest, s.BarrierResponse)
        self.lease_work = method("LeaseWork", s.LeaseRequest, s.LeaseResponse)
        self.report_progress = method("ReportProgress", s.ProgressReport, s.ProgressResponse)
        self.leave = method("Leave", s.LeaveRequest, s.LeaveResponse)

    def register(self, request, timeout=RPC_TIMEOUT_S):
        """Registers, and keeps the answer's session credential for every later call."""
        response = self._register(request, timeout=timeout)
        self.session.credential = response.session_credential
        return response

    def close(self):
        self._channel.close()


class ServerClient:
    """The ParameterServer service (proto/ps.proto) of one server."""

    def __init__(self, address, pb, session):
        """`session`: the registered worker's (SchedulerClient.session)."""
        self._channel = _channel(address)
        p = pb.ps_pb2
        self.pull = _method(self._channel, "ParameterServer", "Pull", p.PullRequest, p.PullResponse, session)
        self.push = _method(self._channel, "ParameterServer", "Push", p.PushRequest, p.PushResponse, session)
        self.push_pull = _method(self._channel, "ParameterServer", "PushPull", p.PushRequest, p.PullResponse,
                                 session)

    def close(self):
        self._channel.close()


class Heartbeater:
    """Heartbeats every heartbeat_ms on a thread, so the scheduler does not declare us dead.

    A failed heartbeat is kept in `error` rather than raised: the main thread decides what it means.
    """

    def __init__(self, scheduler, role, rank, period_ms):
        self._request = scheduler.pb.scheduler_pb2.HeartbeatRequest(role=role, rank=rank)
        self._scheduler = scheduler
        self._period_s = period_ms / 1000.0
        self._stop = threading.Event()
        self.error = None
        self.last = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.last = self._scheduler.heartbeat(self._request, timeout=max(self._period_s * 5, 1.0))
            except grpc.RpcError as e:
                self.error = e
            self._stop.wait(self._period_s)

    def stop(self):
        self._stop.set()
        self._thread.join()


def chunks_of_server(view, server_rank):
    """The ChunkSpecs `server_rank` owns, in shard-map order: the chunk headers its pushes must carry.

    ShardMap.chunks is sorted by (tensor_id, offset) and names each chunk's owner, so a server's
    chunks are simply the map's chunks with its rank, kept in map order (worker/shard_layout.cc does
    the same, adding flat offsets).
    """
    return [c for c in view.shard_map.chunks if c.server_rank == server_rank]
