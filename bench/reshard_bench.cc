// Re-cutting a checkpoint onto another server count (server/checkpoint_reshard.h,
// server/table_reshard.h), as a job resumed on another --servers does: how many rows change
// owner, and what the re-cut costs against reading the same cut on the same count.
//
//   reshard_bench [--rows=1000000] [--dim=16] [--from=2] [--to=3] [--dense=10000000] [--rounds=3]
//
// One embedding table of `rows` rows (random 64-bit keys, Adagrad: 128 bytes a row at dim 16) and
// one dense tensor of `dense` floats (momentum: one state vector) are cut over `from` servers as a
// job places them. Each round, alternating which goes first, every new server's shard is built
// both ways from the old servers' checkpoints (in memory; the file I/O is the same either way):
//   same count   `from` -> `from` (what a resume on the same count restores, re-cut)
//   new count    `from` -> `to`
// It prints the share of rows whose owner changes (issue 27's target for 2 -> 3 on 1M rows: within
// +-2% of 1/3), each round's seconds and the medians with the ratio new / same. Then the network
// form (server/cut_part.h): the bytes the old servers send the new ones when each sends only the
// part a new server keeps, and what building every new shard from those parts costs.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "bench/bench_timing.h"
#include "common/key_hash.h"
#include "model/param_spec.h"
#include "scheduler/shard_map.h"
#include "server/checkpoint.h"
#include "server/checkpoint_reshard.h"
#include "server/cut_part.h"
#include "server/embedding_table.h"

DEFINE_int64(rows, 1000000, "Rows in the table");
DEFINE_int32(dim, 16, "Row width");
DEFINE_int32(from, 2, "Servers the checkpoint was cut on");
DEFINE_int32(to, 3, "Servers to re-cut it onto");
DEFINE_int64(dense, 10000000, "Floats in the dense tensor");
DEFINE_int32(rounds, 3, "Rounds (each re-cuts both ways)");

namespace pstrain::bench {
namespace {

void Check(const absl::Status& s) { CHECK(s.ok()) << s; }

ShardMap MapOf(int servers) {
  model::ParamSpec dense;
  dense.name = "dense";
  dense.shape = {FLAGS_dense};
  dense.num_elements = FLAGS_dense;
  absl::StatusOr<ShardMap> map = scheduler::BuildShardMap(scheduler::TensorSpecsOf({dense}), servers, 4 << 20);
  Check(map.status());
  return *map;
}

// Every server's checkpoint of the cut: its chunks of `map` (value i at element i, state -i) and
// its rows of one table.
std::vector<server::ShardCheckpoint> Cut(const ShardMap& map, int servers, const std::vector<uint64_t>& keys) {
  server::TableOptions options;
  options.name = "ads";
  options.dim = FLAGS_dim;
  options.seed = 1;
  options.optimizer.type = server::SparseOptimizerOptions::Type::kAdagrad;
  std::vector<server::ShardCheckpoint> cut(servers);
  for (int r = 0; r < servers; ++r) {
    server::ShardCheckpoint& ckpt = cut[r];
    ckpt.rank = r;
    ckpt.step = 100;
    ckpt.mode = SYNC;
    ckpt.num_state_vectors = 1;
    ckpt.state.resize(1);
    for (const ChunkSpec& chunk : map.chunks()) {
      if (chunk.server_rank() != r) continue;
      ckpt.chunks.push_back(chunk);
      for (int64_t i = chunk.offset(); i < chunk.offset() + chunk.length(); ++i) {
        ckpt.weights.push_back(static_cast<float>(i));
        ckpt.state[0].push_back(static_cast<float>(-i));
      }
    }
    auto table = server::EmbeddingTable::Create(options);
    Check(table.status());
    std::vector<uint64_t> mine;
    for (uint64_t k : keys) {
      if (ServerOfKey(k, servers) == r) mine.push_back(k);
    }
    for (size_t at = 0; at < mine.size(); at += 65536) {
      const std::vector<uint64_t> part(mine.begin() + at, mine.begin() + std::min(mine.size(), at + 65536));
      Check((*table)->Apply(part, std::vector<float>(part.size() * FLAGS_dim, 0.01f), 0.05f, 0));
    }
    ckpt.tables.emplace_back();
    (*table)->Serialize(&ckpt.tables[0]);
  }
  return cut;
}

int Main() {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys(FLAGS_rows);
  for (uint64_t& k : keys) k = rng();
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  int64_t moved = 0;
  for (uint64_t k : keys) moved += ServerOfKey(k, FLAGS_from) != ServerOfKey(k, FLAGS_to);
  const double share = static_cast<double>(moved) / static_cast<double>(keys.size());
  const double ideal = 1.0 - static_cast<double>(std::min(FLAGS_from, FLAGS_to)) / std::max(FLAGS_from, FLAGS_to);
  std::printf("%zu rows (dim %d, Adagrad), %lld dense floats (momentum); %d -> %d servers\n", keys.size(), FLAGS_dim,
              static_cast<long long>(FLAGS_dense), FLAGS_from, FLAGS_to);
  std::printf("rows whose owner changes: %lld, %.4f of the table (1 - min/max = %.4f; off by %+.2f%%)\n\n",
              static_cast<long long>(moved), share, ideal, 100 * (share - ideal) / ideal);

  const ShardMap from_map = MapOf(FLAGS_from), to_map = MapOf(FLAGS_to);
  const std::vector<server::ShardCheckpoint> cut = Cut(from_map, FLAGS_from, keys);
  int64_t bytes = 0;
  for (const server::ShardCheckpoint& c : cut) bytes += server::CheckpointFileSize(c);
  std::vector<double> same, other;
  auto recut = [&](const ShardMap& map, int servers) {
    return Seconds([&] {
      for (int r = 0; r < servers; ++r) Check(server::ReshardCheckpoints(cut, map, servers, r).status());
    });
  };
  std::printf("| round | same count s | new count s |\n|---|---:|---:|\n");
  for (int round = 0; round < FLAGS_rounds; ++round) {
    if (round % 2 == 0) {
      same.push_back(recut(from_map, FLAGS_from));
      other.push_back(recut(to_map, FLAGS_to));
    } else {
      other.push_back(recut(to_map, FLAGS_to));
      same.push_back(recut(from_map, FLAGS_from));
    }
    std::printf("| %d | %.3f | %.3f |\n", round, same.back(), other.back());
  }
  const double s = Median(same), o = Median(other);
  std::printf("\nmedians over %d rounds, every new server's shard built from the %.1f MB cut:\n\n", FLAGS_rounds,
              bytes / 1e6);
  std::printf("| | same count (%d -> %d) | new count (%d -> %d) | new / same |\n|---|---:|---:|---:|\n", FLAGS_from,
              FLAGS_from, FLAGS_from, FLAGS_to);
  std::printf("| seconds | %.3f | %.3f | %.2f |\n", s, o, o / s);
  std::printf("| MB of the cut per second | %.0f | %.0f | |\n", bytes / 1e6 / s, bytes / 1e6 / o);

  // The network form (server/cut_part.h): each old server cuts its checkpoint down to what each
  // new server keeps and sends it as checkpoint bytes; a new server re-cuts the parts it received
  // and, for its own old rank, its whole file.
  int64_t sent = 0;
  std::vector<double> by_parts;
  for (int round = 0; round < FLAGS_rounds; ++round) {
    by_parts.push_back(Seconds([&] {
      for (int r = 0; r < FLAGS_to; ++r) {
        std::vector<server::ShardCheckpoint> received;
        received.reserve(cut.size());
        std::vector<const server::ShardCheckpoint*> parts;
        for (const server::ShardCheckpoint& own : cut) {
          if (own.rank == r) {
            parts.push_back(&own);
            continue;
          }
          absl::StatusOr<server::ShardCheckpoint> part = server::CutPartFor(own, to_map, FLAGS_to, r);
          Check(part.status());
          absl::StatusOr<std::string> encoded = server::EncodeCheckpoint(*part);
          Check(encoded.status());
          if (round == 0) sent += static_cast<int64_t>(encoded->size());
          absl::StatusOr<server::ShardCheckpoint> decoded = server::DecodeCheckpoint(*encoded, "a part");
          Check(decoded.status());
          received.push_back(*std::move(decoded));
          parts.push_back(&received.back());
        }
        Check(server::ReshardCheckpoints(parts, to_map, FLAGS_to, r).status());
      }
    }));
  }
  const double p = Median(by_parts);
  std::printf("\nthe network form, %d -> %d: the old servers send each new one its part; medians over %d rounds\n\n",
              FLAGS_from, FLAGS_to, FLAGS_rounds);
  std::printf("| | value |\n|---|---:|\n");
  std::printf("| bytes sent between servers | %.1f MB (%.3f of the cut) |\n", sent / 1e6,
              static_cast<double>(sent) / static_cast<double>(bytes));
  std::printf("| every new shard built from parts, s | %.3f (%.2f x from the whole cut) |\n", p, p / o);
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return pstrain::bench::Main();
}
