// gRPC throughput of the parameter server against a bare echo service in the same process, for
// payloads from 4 KiB to 64 MiB. Every benchmark starts its own server on 127.0.0.1:0 hosting the
// echo service (bench/echo_service.h) and a ParameterServerService over a one-tensor store. The
// parameter server is called the way workers call it, through worker::PsClient (raw tensor
// payloads, transport/tensor_wire.h; its default 2 TCP connections, which a whole push, one call a
// step, takes in turn), with the answer copied into a weights buffer as a worker installs it; the
// echo baselines go through blocking protobuf stubs.
//
//   Echo      N bytes each way                    baseline for PushPull
//   PushPull  SYNC, 1 worker: one SGD step + the weights back, N bytes each way
//   PushPullProto  the same through the generated protobuf stub (tensors copied in and out of
//             protobuf `bytes` on the client): what the raw payloads save
//   Send      N bytes up, a count back            baseline for Push
//   Push      ASYNC: N bytes of gradient applied with SGD
//   Fetch     a size up, N bytes back             baseline for Pull
//   Pull      ASYNC: N bytes of weights back
//   TcpPingPong, UnixPingPong   a plain blocking socket sending N bytes and reading N back
//             (bench/socket_pingpong.h): the ceiling of one connection, the baseline the
//             transport is judged against
//   PushPullUnix  PushPull over a unix domain socket instead of TCP on 127.0.0.1
//   PushPullTls   (1 MiB and up) PushPull with mutual TLS and a job token, as a secured job
//             talks between hosts (transport/transport_security.h): what encryption costs
//   PushPullUnixSecured   (1 MiB and up) PushPullUnix with the job's TLS credentials given, so
//             gRPC's local credentials and the job token, as pstrain-launch's workers reach the
//             servers on their own host: what same-host security costs
//   PushPullConnsK, PushPullCallsK   (K = 1, 2, 4; 1 MiB and up) the step as K partial PushPulls
//             started together, as the overlapping worker sends them (chunks of at most N/K
//             bytes), over K connections or all over one: what more connections buy, apart from
//             more calls in flight. PushPullUnixConnsK, PushPullUnixCallsK: the same over a
//             unix socket.
//
// Counters: bytes_per_second counts payload bytes in both directions (2N per round trip for Echo
// and PushPull, N otherwise); `payload_bytes` = N; `cpu_s_per_gb` the process's CPU seconds (both
// ends: client, server and gRPC's threads) per 10^9 of those bytes. Time is wall-clock per call (latency). Each
// benchmark runs three times and reports mean, median and stddev; bench/run.sh makes the ratios
// from the medians.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "transport/grpc_status.h"
#include "transport/job_credentials.h"
#include "common/malloc_tuning.h"
#include "bench/bench_store.h"
#include "bench/echo.grpc.pb.h"
#include "bench/echo_service.h"
#include "bench/socket_pingpong.h"
#include "proto/ps.grpc.pb.h"
#include "transport/tensor_wire.h"
#include "transport/transport_security.h"
#include "server/parameter_store.h"
#include "server/ps_service.h"
#include "worker/ps_client.h"

namespace pstrain::bench {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;
constexpr int64_t kSizes[] = {4 * kKiB, 64 * kKiB, kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB};
// Small enough that thousands of SGD steps keep the weights finite.
constexpr float kGradient = 1e-6f;

// One in-process server: echo + parameter server over a store of `bytes / 4` floats.
class BenchServer {
 public:
  // `unix_socket`: listen and connect on a unix domain socket rather than 127.0.0.1.
  // `max_chunk_bytes`: the store's chunk bound (OneTensorShardMap).
  // `security`: how the listener and the channels are secured (null: plaintext).
  static absl::StatusOr<std::unique_ptr<BenchServer>> Start(
      Mode mode, int64_t bytes, bool unix_socket = false, int64_t max_chunk_bytes = kMaxChunkBytes,
      std::shared_ptr<const TransportSecurity> security = nullptr) {
    auto server = std::unique_ptr<BenchServer>(new BenchServer(bytes, max_chunk_bytes));
    server->security_ = security != nullptr ? std::move(security) : TransportSecurity::Loopback();
    absl::StatusOr<std::unique_ptr<server::ParameterStore>> store =
        NewBenchStore(server->map_, mode, OptimizerSpec::SGD, /*num_workers=*/1);
    if (!store.ok()) return store.status();
    server->store_ = *std::move(store);
    server->ps_service_.SetStore(server->store_.get());

    int port = 0;
    grpc::ServerBuilder builder;
    static std::atomic<int> next_socket{0};
    std::string unix_address;
    if (unix_socket) {
      // A folder only this user may enter: what a secured unix listener requires.
      absl::StatusOr<std::string> dir = PrivateSocketDir("/tmp", absl::StrCat("pstrain-ps-bench-", getpid()));
      if (!dir.ok()) return dir.status();
      unix_address = absl::StrCat("unix:", *dir, "/", next_socket++, ".sock");
    }
    const std::string listen = unix_socket ? unix_address : "127.0.0.1:0";
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = server->security_->ServerCredentials(listen);
    if (!credentials.ok()) return credentials.status();
    builder.AddListeningPort(listen, *credentials, &port);
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    builder.RegisterService(&server->echo_service_);
    builder.RegisterService(&server->ps_service_);
    server->server_ = builder.BuildAndStart();
    if (server->server_ == nullptr || port == 0) {
      return absl::UnavailableError(
          absl::StrCat("bench server: cannot listen on ", unix_socket ? unix_address : "127.0.0.1:0"));
    }

    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    server->channel_ =
        server->security_->NewChannel(unix_socket ? unix_address : absl::StrCat("127.0.0.1:", port), args);
    server->echo_ = Echo::NewStub(server->channel_);
    server->ps_ = ParameterServer::NewStub(server->channel_);
    server->address_ = unix_socket ? unix_address : absl::StrCat("127.0.0.1:", port);
    absl::StatusOr<std::unique_ptr<worker::PsClient>> client = server->NewClient();
    if (!client.ok()) return client.status();
    server->client_ = *std::move(client);
    return server;
  }

  // Another worker client of this server, with channels (so connections) of its own:
  // `tcp_connections` over TCP, one over a unix socket (worker::PsClient). It must be destroyed
  // before this server.
  absl::StatusOr<std::unique_ptr<worker::PsClient>> NewClient(int tcp_connections = 2) const {
    ClusterView view;
    ServerInfo* info = view.add_servers();
    info->set_rank(0);
    info->set_address(address_);
    return worker::PsClient::Create(view, absl::Seconds(60), /*unix_sockets=*/false, tcp_connections, security_);
  }

  ~BenchServer() {
    client_.reset();
    // The store finishes parked rpcs first, then the server drains; the store outlives both.
    store_->Shutdown();
    server_->Shutdown();
  }

  const ShardMap& map() const { return map_; }
  Echo::Stub* echo() { return echo_.get(); }
  ParameterServer::Stub* ps() { return ps_.get(); }
  worker::PsClient* client() { return client_.get(); }

 private:
  BenchServer(int64_t bytes, int64_t max_chunk_bytes)
      : map_(OneTensorShardMap(bytes / 4, max_chunk_bytes)), echo_service_(bytes) {}

  const ShardMap map_;
  std::string address_;  // where clients dial: "127.0.0.1:port" or "unix:path"
  std::shared_ptr<const TransportSecurity> security_;
  std::unique_ptr<server::ParameterStore> store_;
  EchoService echo_service_;
  server::ParameterServerService ps_service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Echo::Stub> echo_;
  std::unique_ptr<ParameterServer::Stub> ps_;
  std::unique_ptr<worker::PsClient> client_;
};

// Copies an answer's values into `weights`, as a worker installs them.
void Install(const IncomingPull& answer, std::vector<float>* weights) {
  char* out = reinterpret_cast<char*>(weights->data());
  for (const PayloadView& v : answer.values) {
    v.CopyTo(out);
    out += v.size();
  }
}

// One blocking call with a generous deadline (a 64 MiB call takes well under a second).
template <typename Call>
grpc::Status CallWithDeadline(Call call) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return call(&context);
}

// CPU time (user + system) of the whole process so far, every thread: both ends of a benchmark
// run in this process, so a difference of two readings is what both ends spent.
double ProcessCpuSeconds() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Sets the counters of a benchmark that moved `bytes_per_iteration` per iteration, with
// `cpu_seconds` of process CPU time over the timed loop: cpu_s_per_gb is CPU seconds (both ends,
// gRPC's threads included) per 10^9 payload bytes moved.
void SetCounters(benchmark::State& state, int64_t payload_bytes, int64_t bytes_per_iteration, double cpu_seconds) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iteration);
  state.counters["payload_bytes"] = static_cast<double>(payload_bytes);
  const double gigabytes = static_cast<double>(state.iterations()) * bytes_per_iteration / 1e9;
  if (gigabytes > 0) state.counters["cpu_s_per_gb"] = cpu_seconds / gigabytes;
}

// Runs `call` once to warm up (connection, buffers), then once per iteration, and sets the
// counters. `call` returns a grpc::Status; a failure stops the benchmark with its message.
template <typename Call>
void Measure(benchmark::State& state, int64_t payload_bytes, int64_t bytes_per_call, Call call) {
  grpc::Status status = call();
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    if (!status.ok()) break;
    status = call();
  }
  const double cpu = ProcessCpuSeconds() - cpu_start;
  if (!status.ok()) {
    state.SkipWithError(absl::StrCat("rpc failed: ", status.error_message()).c_str());
    return;
  }
  SetCounters(state, payload_bytes, bytes_per_call, cpu);
}

// Throwaway job credentials (a CA, a certificate and a token), made once per process in a
// temporary folder, as pstrain-launch makes them for a local job.
absl::StatusOr<std::shared_ptr<const TransportSecurity>> JobSecurity() {
  static absl::StatusOr<std::shared_ptr<const TransportSecurity>>* security = [] {
    char pattern[] = "/tmp/pstrain-ps-bench-tls-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      return new absl::StatusOr<std::shared_ptr<const TransportSecurity>>(absl::InternalError("mkdtemp failed"));
    }
    absl::StatusOr<JobCredentials> made = MakeJobCredentials(pattern);
    if (!made.ok()) return new absl::StatusOr<std::shared_ptr<const TransportSecurity>>(made.status());
    // One process plays both ends with the server's certificate: the client checks the server presents
    // it, and the listener, without a session gate, checks no client role.
    return new absl::StatusOr<std::shared_ptr<const TransportSecurity>>(
        TransportSecurity::Create(made->For(CertRole::kServer)));
  }();
  return *security;
}

std::unique_ptr<BenchServer> StartOrSkip(benchmark::State& state, Mode mode, int64_t bytes, bool unix_socket = false,
                                         int64_t max_chunk_bytes = kMaxChunkBytes, bool tls = false) {
  std::shared_ptr<const TransportSecurity> security;
  if (tls) {
    absl::StatusOr<std::shared_ptr<const TransportSecurity>> made = JobSecurity();
    if (!made.ok()) {
      state.SkipWithError(made.status().ToString().c_str());
      return nullptr;
    }
    security = *made;
  }
  absl::StatusOr<std::unique_ptr<BenchServer>> server =
      BenchServer::Start(mode, bytes, unix_socket, max_chunk_bytes, std::move(security));
  if (!server.ok()) {
    state.SkipWithError(server.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(server);
}

void BM_Echo(benchmark::State& state, int64_t bytes) {
  std::unique_ptr<BenchServer> server = StartOrSkip(state, SYNC, bytes);
  if (server == nullptr) return;
  EchoMessage request;
  request.set_data(std::string(static_cast<size_t>(bytes), '\x02'));
  EchoMessage response;
  Measure(state, bytes, 2 * bytes, [&] {
    return CallWithDeadline([&](grpc::ClientContext* c) { return server->echo()->Echo(c, request, &response); });
  });
}

void PushPullOver(benchmark::State& state, int64_t bytes, bool unix_socket, bool tls = false) {
  std::unique_ptr<BenchServer> server = StartOrSkip(state, SYNC, bytes, unix_socket, kMaxChunkBytes, tls);
  if (server == nullptr) return;
  const PushRequest gradient = GradientPush(server->map(), /*worker_rank=*/0, kGradient);
  std::vector<OutgoingPush> request = {ViewOf(gradient)};
  std::vector<IncomingPull> response;
  std::vector<float> weights(static_cast<size_t>(bytes / 4));
  int64_t step = 0;
  uint64_t request_id = 0;
  Measure(state, bytes, 2 * bytes, [&] {
    request[0].header.set_step(step);
    request[0].header.set_request_id(++request_id);
    absl::Status status = server->client()->PushPullAll(request, &response);
    if (status.ok()) {
      Install(response[0], &weights);
      step = response[0].header.step();  // one worker: every push completes a step
    }
    return ToGrpcStatus(status);
  });
}

void BM_PushPullProto(benchmark::State& state, int64_t bytes) {
  std::unique_ptr<BenchServer> server = StartOrSkip(state, SYNC, bytes);
  if (server == nullptr) return;
  PushRequest request = GradientPush(server->map(), /*worker_rank=*/0, kGradient);
  PullResponse response;
  std::vector<float> weights(static_cast<size_t>(bytes / 4));
  int64_t step = 0;
  uint64_t request_id = 0;
  Measure(state, bytes, 2 * bytes, [&] {
    request.set_step(step);
    request.set_request_id(++request_id);
    grpc::Status status =
        CallWithDeadline([&](grpc::ClientContext* c) { return server->ps()->PushPull(c, request, &response); });
    if (status.ok()) std::memcpy(weights.data(), response.chunks(0).data().data(), response.chunks(0).data().size());
    step = response.step();
    return status;
  });
}

void BM_PushPull(benchmark::State& state, int64_t bytes) { PushPullOver(state, bytes, /*unix_socket=*/false); }
void BM_PushPullUnix(benchmark::State& state, int64_t bytes) { PushPullOver(state, bytes, /*unix_socket=*/true); }
void BM_PushPullTls(benchmark::State& state, int64_t bytes) {
  PushPullOver(state, bytes, /*unix_socket=*/false, /*tls=*/true);
}
void BM_PushPullUnixSecured(benchmark::State& state, int64_t bytes) {
  PushPullOver(state, bytes, /*unix_socket=*/true, /*tls=*/true);
}

// Copies a partial answer's values into `weights` at their chunks' offsets (the one tensor starts
// at 0), as a worker installs each part as it arrives.
void InstallChunks(const IncomingPull& answer, float* weights) {
  for (int i = 0; i < answer.header.chunks_size(); ++i) {
    answer.values[static_cast<size_t>(i)].CopyTo(weights + answer.header.chunks(i).offset());
  }
}

// SYNC, 1 worker, the step sent as `parts` partial PushPulls started together (last part first,
// as the overlapping worker sends them) over `connections` connections. Over TCP that is one
// worker client with `connections` TCP connections, which takes them in turn; a client keeps one
// connection to a unix socket, so there `connections` clients carry part i on client
// i % connections. Each answer is installed in its callback, on a gRPC thread, as the worker
// does. Separates "more concurrent calls" (many parts, one connection) from "more connections"
// (as many connections as parts).
void PartsOver(benchmark::State& state, int64_t bytes, int parts, int connections, bool unix_socket) {
  // Chunks no bigger than a part, so that each part is a run of whole chunks.
  std::unique_ptr<BenchServer> server =
      StartOrSkip(state, SYNC, bytes, unix_socket, std::min(kMaxChunkBytes, bytes / parts));
  if (server == nullptr) return;
  std::vector<std::unique_ptr<worker::PsClient>> clients;
  for (int i = 0; i < (unix_socket ? connections : 1); ++i) {
    absl::StatusOr<std::unique_ptr<worker::PsClient>> client = server->NewClient(unix_socket ? 1 : connections);
    if (!client.ok()) {
      state.SkipWithError(client.status().ToString().c_str());
      return;
    }
    clients.push_back(*std::move(client));
  }
  const std::vector<PushRequest> gradients = PartialGradientPushes(server->map(), /*worker_rank=*/0, kGradient, parts);
  std::vector<OutgoingPush> requests;
  for (const PushRequest& g : gradients) requests.push_back(ViewOf(g));
  std::vector<IncomingPull> responses(static_cast<size_t>(parts));
  std::vector<absl::Status> results(static_cast<size_t>(parts));
  std::vector<float> weights(static_cast<size_t>(bytes / 4));
  int64_t step = 0;
  uint64_t request_id = 0;
  Measure(state, bytes, 2 * bytes, [&] {
    absl::BlockingCounter pending(parts);
    for (int i = parts - 1; i >= 0; --i) {
      requests[i].header.set_step(step);
      requests[i].header.set_request_id(++request_id);
      clients[i % clients.size()]->PushPullAsync(0, &requests[i], &responses[i], [&, i](absl::Status s) {
        if (s.ok()) InstallChunks(responses[i], weights.data());
        ReleaseValues(&responses[i]);
        results[i] = std::move(s);
        pending.DecrementCount();
      });
    }
    pending.Wait();
    for (const absl::Status& s : results) {
      if (!s.ok()) return ToGrpcStatus(s);
    }
    step = responses[0].header.step();  // one worker: every step completes
    return grpc::Status::OK;
  });
}

void PingPongOver(benchmark::State& state, int64_t bytes, PingPong::Transport transport) {
  absl::StatusOr<std::unique_ptr<PingPong>> pp = PingPong::Start(transport, bytes);
  if (!pp.ok()) {
    state.SkipWithError(pp.status().ToString().c_str());
    return;
  }
  absl::Status status = (*pp)->RoundTrip();
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    if (!status.ok()) break;
    status = (*pp)->RoundTrip();
  }
  const double cpu = ProcessCpuSeconds() - cpu_start;
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  SetCounters(state, bytes, 2 * bytes, cpu);
}

void BM_TcpPingPong(benchmark::State& state, int64_t bytes) { PingPongOver(state, bytes, PingPong::Transport::kTcp); }
void BM_UnixPingPong(benchmark::State& state, int64_t bytes) { PingPongOver(state, bytes, PingPong::Transport::kUnix); }

void BM_Send(benchmark::State& state, int64_t bytes) {
  std::unique_ptr<BenchServer> server = StartOrSkip(state, ASYNC, bytes);
  if (server == nullptr) return;
  EchoMessage request;
  request.set_data(std::string(static_cast<size_t>(bytes), '\x02'));
  SendReply response;
  Measure(state, bytes, bytes, [&] {
    return CallWithDeadline([&](grpc::ClientContext* c) { return server->echo()->Send(c, request, &response); });
  });
}

void BM_Push(benchmark::State& state, int64_t bytes) {
  std::unique_ptr<BenchServer> server = StartOrSkip(state, ASYNC, bytes);
  if (server == nullptr) return;
  const PushRequest gradient = GradientPush(server->map(), /*worker_rank=*/0, kGradient);
  OutgoingPush request = ViewOf(gradient);
  PushResponse response;
  uint64_t request_id = 0;
  Measure(state, bytes, bytes, [&] {
    request.header.set_step(static_cast<int64_t>(request_id));
    request.header.set_request_id(++request_id);
    absl::Notification done;
    absl::Status result;
    server->client()->PushAsync(0, &request, &response, [&](absl::Status s) {
      result = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return ToGrpcStatus(result);
  });
}

void BM_Fetch(benchmark::State& state, int64_t bytes) {
  std::unique_ptr<BenchServer> server = StartOrSkip(state, ASYNC, bytes);
  if (server == nullptr) return;
  FetchRequest request;
  request.set_size(bytes);
  EchoMessage response;
  Measure(state, bytes, bytes, [&] {
    return CallWithDeadline([&](grpc::ClientContext* c) { return server->echo()->Fetch(c, request, &response); });
  });
}

void BM_Pull(benchmark::State& state, int64_t bytes) {
  std::unique_ptr<BenchServer> server = StartOrSkip(state, ASYNC, bytes);
  if (server == nullptr) return;
  std::vector<PullRequest> request(1);
  request[0].set_worker_rank(0);
  request[0].set_membership_epoch(1);
  std::vector<IncomingPull> response;
  std::vector<float> weights(static_cast<size_t>(bytes / 4));
  Measure(state, bytes, bytes, [&] {
    absl::Status status = server->client()->PullAll(request, &response);
    if (status.ok()) Install(response[0], &weights);
    return ToGrpcStatus(status);
  });
}

std::string SizeName(int64_t bytes) {
  return bytes >= kMiB ? absl::StrCat(bytes / kMiB, "MiB") : absl::StrCat(bytes / kKiB, "KiB");
}

// Three repetitions; run.sh takes the medians, which shrugs off a burst of noise from other
// processes. Big payloads take 10-500 ms a call: a fixed count keeps the whole run near a minute.
void Configure(benchmark::internal::Benchmark* b, int64_t bytes) {
  b->UseRealTime()->Unit(benchmark::kMicrosecond)->Repetitions(3)->ReportAggregatesOnly(true);
  if (bytes >= 64 * kMiB) {
    b->Iterations(4);
  } else if (bytes >= 16 * kMiB) {
    b->Iterations(12);
  } else {
    b->MinTime(0.1);
  }
}

void RegisterAll() {
  using Fn = void (*)(benchmark::State&, int64_t);
  const std::pair<const char*, Fn> kinds[] = {
      {"Echo", BM_Echo},
      {"PushPull", BM_PushPull},
      {"PushPullProto", BM_PushPullProto},
      {"Send", BM_Send},
      {"Push", BM_Push},
      {"Fetch", BM_Fetch},
      {"Pull", BM_Pull},
      {"TcpPingPong", BM_TcpPingPong},
      {"UnixPingPong", BM_UnixPingPong},
      {"PushPullUnix", BM_PushPullUnix},
  };
  for (int64_t bytes : kSizes) {
    for (const auto& [name, fn] : kinds) {
      Configure(benchmark::RegisterBenchmark(absl::StrCat(name, "/", SizeName(bytes)).c_str(), fn, bytes), bytes);
    }
  }
  for (int64_t bytes : kSizes) {
    if (bytes < kMiB) continue;
    Configure(
        benchmark::RegisterBenchmark(absl::StrCat("PushPullTls/", SizeName(bytes)).c_str(), BM_PushPullTls, bytes),
        bytes);
    Configure(benchmark::RegisterBenchmark(absl::StrCat("PushPullUnixSecured/", SizeName(bytes)).c_str(),
                                           BM_PushPullUnixSecured, bytes),
              bytes);
  }
  // The step in K partial PushPulls: PushPull{Conns,Calls}K over K connections or over one.
  for (int64_t bytes : kSizes) {
    if (bytes < kMiB) continue;
    for (const bool unix_socket : {false, true}) {
      const std::string prefix = unix_socket ? "PushPullUnix" : "PushPull";
      for (const int parts : {1, 2, 4}) {
        Configure(benchmark::RegisterBenchmark(absl::StrCat(prefix, "Conns", parts, "/", SizeName(bytes)).c_str(),
                                               PartsOver, bytes, parts, /*connections=*/parts, unix_socket),
                  bytes);
        if (parts == 1) continue;  // Conns1 is Calls1
        Configure(benchmark::RegisterBenchmark(absl::StrCat(prefix, "Calls", parts, "/", SizeName(bytes)).c_str(),
                                               PartsOver, bytes, parts, /*connections=*/1, unix_socket),
                  bytes);
      }
    }
  }
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  // Like the role binaries, keep freed memory for reuse, unless --glibc_default_malloc asks for
  // glibc's defaults (to show what the setting buys).
  bool tune_malloc = true;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--glibc_default_malloc") {
      tune_malloc = false;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (tune_malloc) pstrain::KeepFreedMemoryForReuse();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // Every benchmark creates a store, which logs at INFO; keep the report readable.
  FLAGS_minloglevel = google::GLOG_WARNING;
  pstrain::bench::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
