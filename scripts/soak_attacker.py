"""The refused-call stream of scripts/soak.sh: until the process --until_pid exits, calls every
port in --ports the ways an outsider would, each of which a secured job must refuse:

  plaintext       no TLS at all (the handshake fails)
  stranger        a certificate that another CA signed, with the job's token
  no-token        the job's own certificate and key, no token
  wrong-token     the job's certificate with a token of its own
  no-session      the job's certificate and token (a member), but no session credential
  forged-session  the same with a worker-0 session credential no scheduler of this job signed

Each round calls, on every port over a fresh connection, Scheduler.Register (a few bytes; the
members call Scheduler.Leave for worker 0 instead, since a member may register) and
ParameterServer.Push (1 MiB of garbage). Prints how many calls each kind made, the status codes they
got, and "accepted N": calls that succeeded, which must be 0. Debian's python3-grpcio only."""

import argparse
import collections
import os
import time

import grpc

PUSH_BYTES = os.urandom(1 << 20)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def channel(port, kind, job, stranger):
    address = "127.0.0.1:%s" % port
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", -1)]
    if kind == "plaintext":
        return grpc.insecure_channel(address, options=options)
    source = stranger if kind == "stranger" else job
    credentials = grpc.ssl_channel_credentials(root_certificates=read(os.path.join(job, "ca.pem")),
                                               private_key=read(os.path.join(source, "worker-key.pem")),
                                               certificate_chain=read(os.path.join(source, "worker.pem")))
    return grpc.secure_channel(address, credentials, options + [("grpc.ssl_target_name_override", "pstrain")])


# A well-formed credential (payload "pstrain-session-v1", worker, rank 0) with a signature of zeros.
FORGED_SESSION = "cHN0cmFpbi1zZXNzaW9uLXYxCjIKMAo." + "A" * 86


def metadata(kind, job, stranger):
    job_token = [("authorization", "Bearer " + read(os.path.join(job, "token")).decode().strip())]
    if kind == "stranger":
        return job_token
    if kind == "wrong-token":
        return [("authorization", "Bearer " + read(os.path.join(stranger, "token")).decode().strip())]
    if kind == "no-session":
        return job_token
    if kind == "forged-session":
        return job_token + [("pstrain-session", FORGED_SESSION)]
    return []


def methods(kind):
    first = ("/pstrain.Scheduler/Leave", b"\x08\x02") if kind.endswith("session") else \
        ("/pstrain.Scheduler/Register", b"\x08\x02")
    return (first, ("/pstrain.ParameterServer/Push", PUSH_BYTES))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--job_dir", required=True)
    parser.add_argument("--stranger_dir", required=True)
    parser.add_argument("--ports", required=True, help="space-separated ports on 127.0.0.1")
    parser.add_argument("--until_pid", type=int, required=True)
    parser.add_argument("--pause_s", type=float, default=0.05)
    args = parser.parse_args()
    ports = args.ports.split()
    kinds = ("plaintext", "stranger", "no-token", "wrong-token", "no-session", "forged-session")
    calls = collections.Counter()
    codes = collections.defaultdict(collections.Counter)
    details = {}
    accepted = 0
    started = time.time()
    while alive(args.until_pid):
        for port in ports:
            for kind in kinds:
                with channel(port, kind, args.job_dir, args.stranger_dir) as ch:
                    for method, payload in methods(kind):
                        call = ch.unary_unary(method, request_serializer=lambda b: b,
                                              response_deserializer=lambda b: b)
                        calls[kind] += 1
                        try:
                            call(payload, timeout=5, metadata=metadata(kind, args.job_dir, args.stranger_dir))
                            accepted += 1
                        except grpc.RpcError as e:
                            codes[kind][e.code().name] += 1
                            details.setdefault((kind, e.code().name), e.details()[:160])
        time.sleep(args.pause_s)
    seconds = time.time() - started
    print("refused-call stream: %d calls in %.0f s (%.0f/s) on ports %s"
          % (sum(calls.values()), seconds, sum(calls.values()) / max(seconds, 1e-9), " ".join(ports)))
    for kind in kinds:
        print("  %-12s %6d calls: %s" % (kind, calls[kind],
                                        ", ".join("%s %d" % kv for kv in sorted(codes[kind].items()))))
    print("first answer of each kind and code:")
    for (kind, code), text in sorted(details.items()):
        print("  %-12s %-18s %s" % (kind, code, text))
    print("accepted %d" % accepted)


if __name__ == "__main__":
    main()
