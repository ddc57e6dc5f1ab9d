// Sparse pull and push through a real gRPC parameter server, against two baselines that move the
// same bytes: a plain socket and the table alone in process (issue 14's throughput table).
//
// Every shape is <keys>/<dim>: requests of 10k or 100k sorted unique keys of a table of dim 8, 16
// or 64. One server per dim (started on first use, kept for the run) hosts a ParameterServerService
// over an ASYNC store holding that one table, Adagrad, pre-filled with kUniverse rows; an
// in-process EmbeddingTable of the same options holds the same keys. Calls go through
// worker::PsClient and worker::SparseRowsCache exactly as a training worker makes them: the request
// is built from the batch's keys each call, and a pull's answer is scattered into the batch's rows.
//
//   Pull/<keys>/<dim>          PullRequest{rows_only, one SparseRows of keys}: keys up, keys + rows back
//   Push/<keys>/<dim>          ASYNC PushRequest with the row gradients (and the one-float dense
//                              chunk every push carries): applied (Adagrad) before the answer
//   PullPingPong/<keys>/<dim>  a blocking TCP socket on 127.0.0.1: 8 x keys bytes up, what a pull
//                              answers back (8 + 4 x dim bytes per key) (bench/socket_pingpong.h)
//   PushPingPong/<keys>/<dim>  the same socket: a push's keys and rows up, 8 bytes back
//   TableRead/<keys>/<dim>     EmbeddingTable::Read of the keys (what the server does for a pull)
//   TableApply/<keys>/<dim>    EmbeddingTable::Apply of the gradient rows (the server's update)
//
// Each call takes the next of kBatches random samples of the universe, sorted, as a batch's keys
// are spread over the table. Counters: items_per_second = keys/s; bytes_per_second counts
// 8 + 4 x dim bytes per key for every benchmark (the rows and their keys, one way), so GB/s ratios
// are inverse time ratios; cpu_s_per_gb = the process's CPU seconds (client, server and gRPC
// threads; both ends of the socket) per 10^9 of those bytes. bench/sparse.sh runs the repetitions
// interleaved and bench/report.py sparse makes the table from the medians.
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "bench/bench_store.h"
#include "bench/socket_pingpong.h"
#include "common/key_hash.h"
#include "common/malloc_tuning.h"
#include "common/tensor_messages.h"
#include "server/embedding_table.h"
#include "server/parameter_store.h"
#include "server/ps_service.h"
#include "worker/ps_client.h"
#include "worker/sparse_rows_cache.h"

namespace pstrain::bench {
namespace {

constexpr int64_t kUniverse = 1000000;
constexpr int kBatches = 4;
constexpr int64_t kFillKeys = 100000;  // keys per push while filling the tables
constexpr float kTableLr = 0.05f;      // the job default for Adagrad tables
constexpr float kGradient = 1e-3f;

// The universe's keys, ascending: random 64-bit keys as a hashed categorical value gives them.
const std::vector<uint64_t>& Universe() {
  static const std::vector<uint64_t>* keys = [] {
    auto* k = new std::vector<uint64_t>(kUniverse);
    for (int64_t i = 0; i < kUniverse; ++i) (*k)[i] = MixKey64(static_cast<uint64_t>(i) + 1);
    std::sort(k->begin(), k->end());
    return k;
  }();
  return *keys;
}

// kBatches samples of `n` keys of the universe, each sorted; drawn once per n.
const std::vector<std::vector<uint64_t>>& Batches(int64_t n) {
  static auto* by_size = new std::map<int64_t, std::vector<std::vector<uint64_t>>>;
  std::vector<std::vector<uint64_t>>& batches = (*by_size)[n];
  if (!batches.empty()) return batches;
  std::vector<uint64_t> keys = Universe();
  std::mt19937_64 rng(static_cast<uint64_t>(n));
  for (int b = 0; b < kBatches; ++b) {
    std::shuffle(keys.begin(), keys.end(), rng);
    std::vector<uint64_t> batch(keys.begin(), keys.begin() + n);
    std::sort(batch.begin(), batch.end());
    batches.push_back(std::move(batch));
  }
  return batches;
}

// One parameter server on 127.0.0.1 whose store holds one Adagrad table of `dim`, filled with the
// universe's rows through pushes, and a worker client of it.
class SparseServer {
 public:
  static absl::StatusOr<std::unique_ptr<SparseServer>> Start(int dim) {
    auto s = std::unique_ptr<SparseServer>(new SparseServer());
    server::ParameterStore::Options options;
    options.rank = 0;
    options.job.set_mode(ASYNC);
    options.job.set_num_servers(1);
    options.job.set_num_workers(1);
    options.job.mutable_optimizer()->set_type(OptimizerSpec::SGD);
    TableSpec* table = options.job.add_tables();
    table->set_name(absl::StrCat("d", dim));
    table->set_dim(dim);
    table->mutable_optimizer()->set_type(SparseOptimizerSpec::ADAGRAD);
    table->mutable_optimizer()->set_lr(kTableLr);
    options.shard_map = s->map_;
    options.num_workers = 1;
    options.membership_epoch = 1;
    options.total_steps = 1'000'000;
    absl::StatusOr<std::unique_ptr<server::ParameterStore>> store = server::ParameterStore::Create(options);
    if (!store.ok()) return store.status();
    s->store_ = *std::move(store);
    s->service_.SetStore(s->store_.get());

    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    builder.RegisterService(&s->service_);
    s->server_ = builder.BuildAndStart();
    if (s->server_ == nullptr || port == 0) return absl::UnavailableError("sparse bench: cannot listen on 127.0.0.1:0");
    ClusterView view;
    ServerInfo* info = view.add_servers();
    info->set_rank(0);
    info->set_address(absl::StrCat("127.0.0.1:", port));
    absl::StatusOr<std::unique_ptr<worker::PsClient>> client =
        worker::PsClient::Create(view, absl::Seconds(60), /*unix_sockets=*/false);
    if (!client.ok()) return client.status();
    s->client_ = *std::move(client);

    // Every row of the universe exists before timing starts: a pull reads rows, a push updates them.
    const std::vector<uint64_t>& keys = Universe();
    for (int64_t first = 0; first < kUniverse; first += kFillKeys) {
      const int64_t n = std::min(kFillKeys, kUniverse - first);
      worker::SparseRowsCache cache({dim}, 1);
      if (absl::Status st = cache.SetKeys({absl::MakeConstSpan(keys.data() + first, n)}); !st.ok()) return st;
      std::fill(cache.row_gradient(0).begin(), cache.row_gradient(0).end(), kGradient);
      if (absl::Status st = s->Push(cache); !st.ok()) return st;
    }
    return s;
  }

  ~SparseServer() {
    client_.reset();
    // The store finishes parked rpcs first, then the server drains; the store outlives both.
    if (store_ != nullptr) store_->Shutdown();
    if (server_ != nullptr) server_->Shutdown();
  }

  // One rows_only pull of `cache`'s keys, scattered into its rows, as TrainingSession::PullCachedRows.
  absl::Status Pull(worker::SparseRowsCache* cache) {
    std::vector<PullRequest> requests(1);
    PullRequest& r = requests[0];
    r.set_shard(0);
    r.set_worker_rank(0);
    r.set_membership_epoch(1);
    r.set_rows_only(true);
    cache->AddPullKeys(0, r.mutable_sparse());
    if (absl::Status s = client_->PullAll(requests, &answers_); !s.ok()) return s;
    return cache->ScatterRows(0, answers_[0].sparse);
  }

  // One push of `cache`'s row gradients, applied before the answer (ASYNC).
  absl::Status Push(worker::SparseRowsCache& cache) {
    push_.header.set_request_id(++request_id_);
    push_.sparse.clear();
    cache.AddPushRows(0, &push_.sparse);
    absl::Notification done;
    absl::Status result;
    PushResponse response;
    client_->PushAsync(0, &push_, &response, [&](absl::Status s) {
      result = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return result;
  }

 private:
  SparseServer()
      : map_(OneTensorShardMap(1)), dense_(GradientPush(map_, /*worker_rank=*/0, kGradient)), push_(ViewOf(dense_)) {}

  const ShardMap map_;
  // The dense gradient every push carries (one float, one sample); push_ points into it.
  const PushRequest dense_;
  OutgoingPush push_;
  uint64_t request_id_ = 0;
  std::vector<IncomingPull> answers_;
  std::unique_ptr<server::ParameterStore> store_;
  server::ParameterServerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<worker::PsClient> client_;
};

// The in-process baseline: an EmbeddingTable with the server's options and the same rows.
absl::StatusOr<std::unique_ptr<server::EmbeddingTable>> FilledTable(int dim) {
  server::TableOptions options;
  options.name = absl::StrCat("d", dim);
  options.dim = dim;
  options.optimizer.type = server::SparseOptimizerOptions::Type::kAdagrad;
  absl::StatusOr<std::unique_ptr<server::EmbeddingTable>> table = server::EmbeddingTable::Create(options);
  if (!table.ok()) return table.status();
  const std::vector<float> grads(static_cast<size_t>(kUniverse) * dim, kGradient);
  if (absl::Status s = (*table)->Apply(Universe(), grads, kTableLr); !s.ok()) return s;
  return table;
}

// Servers and tables by dim, built on first use and kept for the whole run, so interleaved
// repetitions do not refill a million rows each time. ReleaseFixtures ends them before exit.
struct Fixture {
  std::unique_ptr<SparseServer> server;
  std::unique_ptr<server::EmbeddingTable> table;
};
std::map<int, Fixture>& Fixtures() {
  static auto* fixtures = new std::map<int, Fixture>;
  return *fixtures;
}
void ReleaseFixtures() { Fixtures().clear(); }

Fixture* FixtureOrSkip(benchmark::State& state, int dim, bool want_server) {
  Fixture& f = Fixtures()[dim];
  if (want_server && f.server == nullptr) {
    absl::StatusOr<std::unique_ptr<SparseServer>> server = SparseServer::Start(dim);
    if (!server.ok()) {
      state.SkipWithError(server.status().ToString().c_str());
      return nullptr;
    }
    f.server = *std::move(server);
  }
  if (!want_server && f.table == nullptr) {
    absl::StatusOr<std::unique_ptr<server::EmbeddingTable>> table = FilledTable(dim);
    if (!table.ok()) {
      state.SkipWithError(table.status().ToString().c_str());
      return nullptr;
    }
    f.table = *std::move(table);
  }
  return &f;
}

// The batches as a worker holds them: one SparseRowsCache each, gradients set.
std::vector<std::unique_ptr<worker::SparseRowsCache>> Caches(int64_t n, int dim) {
  std::vector<std::unique_ptr<worker::SparseRowsCache>> caches;
  for (const std::vector<uint64_t>& batch : Batches(n)) {
    auto cache = std::make_unique<worker::SparseRowsCache>(std::vector<int>{dim}, 1);
    CHECK(cache->SetKeys({batch}).ok());
    std::fill(cache->row_gradient(0).begin(), cache->row_gradient(0).end(), kGradient);
    caches.push_back(std::move(cache));
  }
  return caches;
}

double ProcessCpuSeconds() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Runs `call(b)` once per batch to warm up, then with b = 0, 1, ... kBatches - 1, 0, ... per
// iteration, and sets the counters for `n` keys of `dim` per call.
template <typename Call>
void Measure(benchmark::State& state, int64_t n, int dim, Call call) {
  absl::Status status;
  for (int b = 0; b < kBatches && status.ok(); ++b) status = call(b);
  const double cpu_start = ProcessCpuSeconds();
  int b = 0;
  for (auto _ : state) {
    if (!status.ok()) break;
    status = call(b);
    b = (b + 1) % kBatches;
  }
  const double cpu = ProcessCpuSeconds() - cpu_start;
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  const int64_t bytes = n * (8 + 4 * int64_t{dim});
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["payload_bytes"] = static_cast<double>(bytes);
  const double gigabytes = static_cast<double>(state.iterations()) * bytes / 1e9;
  if (gigabytes > 0) state.counters["cpu_s_per_gb"] = cpu / gigabytes;
}

void BM_Pull(benchmark::State& state, int64_t n, int dim) {
  Fixture* f = FixtureOrSkip(state, dim, /*want_server=*/true);
  if (f == nullptr) return;
  std::vector<std::unique_ptr<worker::SparseRowsCache>> caches = Caches(n, dim);
  Measure(state, n, dim, [&](int b) { return f->server->Pull(caches[b].get()); });
}

void BM_Push(benchmark::State& state, int64_t n, int dim) {
  Fixture* f = FixtureOrSkip(state, dim, /*want_server=*/true);
  if (f == nullptr) return;
  std::vector<std::unique_ptr<worker::SparseRowsCache>> caches = Caches(n, dim);
  Measure(state, n, dim, [&](int b) { return f->server->Push(*caches[b]); });
}

void PingPongOf(benchmark::State& state, int64_t n, int dim, int64_t request_bytes, int64_t reply_bytes) {
  absl::StatusOr<std::unique_ptr<PingPong>> pp = PingPong::Start(PingPong::Transport::kTcp, request_bytes, reply_bytes);
  if (!pp.ok()) {
    state.SkipWithError(pp.status().ToString().c_str());
    return;
  }
  Measure(state, n, dim, [&](int) { return (*pp)->RoundTrip(); });
}

void BM_PullPingPong(benchmark::State& state, int64_t n, int dim) {
  PingPongOf(state, n, dim, 8 * n, n * (8 + 4 * int64_t{dim}));
}

void BM_PushPingPong(benchmark::State& state, int64_t n, int dim) {
  PingPongOf(state, n, dim, n * (8 + 4 * int64_t{dim}), 8);
}

void BM_TableRead(benchmark::State& state, int64_t n, int dim) {
  Fixture* f = FixtureOrSkip(state, dim, /*want_server=*/false);
  if (f == nullptr) return;
  const std::vector<std::vector<uint64_t>>& batches = Batches(n);
  std::vector<float> out(static_cast<size_t>(n) * dim);
  Measure(state, n, dim, [&](int b) {
    absl::Status s = f->table->Read(batches[b], absl::MakeSpan(out));
    benchmark::DoNotOptimize(out.data());
    return s;
  });
}

void BM_TableApply(benchmark::State& state, int64_t n, int dim) {
  Fixture* f = FixtureOrSkip(state, dim, /*want_server=*/false);
  if (f == nullptr) return;
  const std::vector<std::vector<uint64_t>>& batches = Batches(n);
  const std::vector<float> grads(static_cast<size_t>(n) * dim, kGradient);
  Measure(state, n, dim, [&](int b) { return f->table->Apply(batches[b], grads, kTableLr); });
}

void RegisterAll() {
  using Fn = void (*)(benchmark::State&, int64_t, int);
  const std::pair<const char*, Fn> kinds[] = {
      {"Pull", BM_Pull}, {"PullPingPong", BM_PullPingPong}, {"TableRead", BM_TableRead},
      {"Push", BM_Push}, {"PushPingPong", BM_PushPingPong}, {"TableApply", BM_TableApply},
  };
  for (const int64_t n : {10000, 100000}) {
    for (const int dim : {8, 16, 64}) {
      for (const auto& [name, fn] : kinds) {
        benchmark::RegisterBenchmark(absl::StrCat(name, "/", n, "/", dim).c_str(), fn, n, dim)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.2);
      }
    }
  }
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  // Like the role binaries.
  pstrain::KeepFreedMemoryForReuse();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;
  pstrain::bench::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  pstrain::bench::ReleaseFixtures();
  benchmark::Shutdown();
  return 0;
}
