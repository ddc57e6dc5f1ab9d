// One embedding-table shard in process (server/embedding_table.h), no network: the baseline the
// sparse pull/push throughput target of issue 14 is compared against.
//
//   Pull/<keys>/<dim>    EmbeddingTable::Pull of `keys` sorted unique keys (rows that exist)
//   Apply/<keys>/<dim>   EmbeddingTable::Apply of one Adagrad gradient row per key
//   ApplyTracked/...     the same, with eviction's per-row metadata kept (each update stamps the
//                        row's last update and count: TableOptions.track_rows, as under a TTL)
//   ApplyFp16/...        the same on rows stored as fp16 (TableOptions.row_dtype)
//   ApplyKeepingBefore/. the same, copying each row out before its update (Apply's values_before,
//                        as a SYNC server does for a recomputed step: server/rows_before_update.h)
//   EvictionPass/<rows>  one TTL eviction pass (EmbeddingTable::AfterUpdate when due) over a table
//                        of `rows` rows with random last updates, of which none is old enough to
//                        leave: the cost of checking every row, paid every eviction interval
//
// The table holds kUniverse rows, created before timing starts; each call takes the next of
// kBatches precomputed random samples of the universe, sorted, so the rows touched are spread
// over the whole table as a real batch's are (cache misses included; the 8 batches of 10k keys
// touch 80k rows, which partly stay in the last-level cache, while 100k-key batches cover most of
// the table, so the 100k figures are the colder ones). items_per_second = keys/s;
// bytes_per_second counts what such a request carries on the wire, 8 bytes of key plus
// dim * 4 bytes of row per key.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "common/key_hash.h"
#include "server/embedding_table.h"

namespace pstrain::bench {
namespace {

constexpr int64_t kUniverse = 1000000;
constexpr int kBatches = 8;

struct Fixture {
  std::unique_ptr<server::EmbeddingTable> table;
  std::vector<std::vector<uint64_t>> batches;
};

Fixture MakeFixture(int64_t num_keys, int dim, bool tracked = false, TableSpec::RowDtype dtype = TableSpec::FP32) {
  server::TableOptions options;
  options.name = "bench";
  options.dim = dim;
  options.track_rows = tracked;
  options.row_dtype = dtype;
  Fixture f;
  f.table = server::EmbeddingTable::Create(options).value();
  std::vector<uint64_t> keys(kUniverse);
  for (int64_t i = 0; i < kUniverse; ++i) keys[i] = MixKey64(static_cast<uint64_t>(i));
  std::vector<uint64_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  std::vector<float> out(sorted.size() * dim);
  if (!f.table->Pull(sorted, absl::MakeSpan(out)).ok()) std::abort();
  std::mt19937_64 rng(1);
  for (int b = 0; b < kBatches; ++b) {
    std::shuffle(keys.begin(), keys.end(), rng);
    std::vector<uint64_t> batch(keys.begin(), keys.begin() + num_keys);
    std::sort(batch.begin(), batch.end());
    f.batches.push_back(std::move(batch));
  }
  return f;
}

void SetCounters(benchmark::State& state, int64_t num_keys, int dim) {
  state.SetItemsProcessed(state.iterations() * num_keys);
  state.SetBytesProcessed(state.iterations() * num_keys * (8 + 4 * dim));
}

void BM_Pull(benchmark::State& state) {
  const int64_t num_keys = state.range(0);
  const int dim = static_cast<int>(state.range(1));
  Fixture f = MakeFixture(num_keys, dim);
  std::vector<float> out(num_keys * dim);
  int b = 0;
  for (auto _ : state) {
    if (!f.table->Pull(f.batches[b], absl::MakeSpan(out)).ok()) state.SkipWithError("pull failed");
    benchmark::DoNotOptimize(out.data());
    b = (b + 1) % kBatches;
  }
  SetCounters(state, num_keys, dim);
}

void ApplyWith(benchmark::State& state, bool tracked, TableSpec::RowDtype dtype, bool keep_before = false) {
  const int64_t num_keys = state.range(0);
  const int dim = static_cast<int>(state.range(1));
  Fixture f = MakeFixture(num_keys, dim, tracked, dtype);
  std::vector<float> grads(num_keys * dim);
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1e-2f);
  for (float& g : grads) g = dist(rng);
  std::vector<float> before(keep_before ? num_keys * dim : 0);
  int b = 0;
  int64_t update = 0;
  for (auto _ : state) {
    if (!f.table->Apply(f.batches[b], grads, 0.01f, update++, absl::MakeSpan(before)).ok()) {
      state.SkipWithError("apply failed");
    }
    b = (b + 1) % kBatches;
  }
  SetCounters(state, num_keys, dim);
}

void BM_Apply(benchmark::State& state) { ApplyWith(state, false, TableSpec::FP32); }
void BM_ApplyTracked(benchmark::State& state) { ApplyWith(state, true, TableSpec::FP32); }
void BM_ApplyFp16(benchmark::State& state) { ApplyWith(state, false, TableSpec::FP16); }
void BM_ApplyKeepingBefore(benchmark::State& state) { ApplyWith(state, false, TableSpec::FP32, true); }

void BM_EvictionPass(benchmark::State& state) {
  const int64_t rows = state.range(0);
  server::TableOptions options;
  options.name = "bench";
  options.dim = 16;
  options.eviction.set_ttl_updates(1000000);  // nothing leaves: the pass checks every row
  options.eviction.set_every_updates(1);
  auto table = server::EmbeddingTable::Create(options).value();
  // Rows created by 100 updates of random keys, so that their metadata is in random order.
  std::vector<uint64_t> keys(rows);
  for (int64_t i = 0; i < rows; ++i) keys[i] = MixKey64(static_cast<uint64_t>(i));
  std::mt19937_64 rng(3);
  std::shuffle(keys.begin(), keys.end(), rng);
  const int64_t per_update = rows / 100;
  for (int64_t u = 0; u < 100; ++u) {
    std::vector<uint64_t> batch(keys.begin() + u * per_update, keys.begin() + (u + 1) * per_update);
    std::sort(batch.begin(), batch.end());
    if (!table->Apply(batch, std::vector<float>(batch.size() * 16, 0.01f), 0.01f, u).ok()) std::abort();
  }
  int64_t update = 100;
  for (auto _ : state) table->AfterUpdate(update++);
  if (table->num_rows() != per_update * 100) state.SkipWithError("rows left");
  state.SetItemsProcessed(state.iterations() * table->num_rows());
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"keys", "dim"});
  for (int64_t keys : {10000, 100000}) {
    for (int64_t dim : {8, 16, 64}) b->Args({keys, dim});
  }
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Pull)->Apply(Shapes);
BENCHMARK(BM_Apply)->Apply(Shapes);
BENCHMARK(BM_ApplyTracked)->Apply(Shapes);
BENCHMARK(BM_ApplyFp16)->Apply(Shapes);
BENCHMARK(BM_ApplyKeepingBefore)->Apply(Shapes);
BENCHMARK(BM_EvictionPass)->Arg(20000)->Arg(500000)->ArgName("rows")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pstrain::bench

BENCHMARK_MAIN();
