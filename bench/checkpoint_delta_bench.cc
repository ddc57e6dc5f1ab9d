// Delta checkpoints against whole ones, for one embedding table of a server's shard
// (server/checkpoint_chain.h; issue 26's target: with 1% of the rows touched since the last cut,
// a delta is at most 5% of a whole checkpoint's bytes and takes at most 10% of its time).
//
//   checkpoint_delta_bench [--rows=1000000] [--dim=16] [--touched=0.01] [--rounds=3] [--dir=DIR]
//
// A table of `rows` rows (Adagrad: value and accumulator, 128 bytes a row at dim 16) is cut once;
// then, each round, `touched` of its rows (random, plus as many new keys as one in ten of them)
// are updated and the cut is written both ways, alternating which goes first:
//   whole   EmbeddingTable::Serialize + WriteCheckpoint (the snapshot under the store's lock, then
//           the file: write, fsync, rename)
//   delta   EmbeddingTable::SerializeDelta + WriteCheckpoint of a version-3 file
// and the chain is read back (ReadCheckpointChain of the delta on the whole file) against
// ReadCheckpoint of the whole file. It prints each round and the medians with the ratios delta /
// whole. Files go to DIR (default: a fresh folder under /tmp, removed at exit).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "bench/bench_timing.h"
#include "server/checkpoint.h"
#include "server/checkpoint_chain.h"
#include "server/embedding_table.h"

DEFINE_int64(rows, 1000000, "Rows in the table");
DEFINE_int32(dim, 16, "Row width");
DEFINE_double(touched, 0.01, "Fraction of the rows updated between cuts");
DEFINE_int32(rounds, 3, "Rounds (each writes both kinds)");
DEFINE_string(dir, "", "Where the files go (default: a fresh folder under /tmp, removed at exit)");

namespace pstrain::bench {
namespace {

void Check(const absl::Status& s) { CHECK(s.ok()) << s; }

// Updates `keys` (sorted unique) once with a small gradient, as update `step`.
void Update(server::EmbeddingTable& table, const std::vector<uint64_t>& keys, int64_t step) {
  std::vector<float> grads(keys.size() * table.dim(), 0.01f);
  Check(table.Apply(keys, grads, 0.05f, step));
}

struct Timing {
  std::vector<double> snapshot, write, read;
  std::vector<int64_t> bytes;
};

int Main() {
  std::string dir = FLAGS_dir;
  const bool own_dir = dir.empty();
  if (own_dir) dir = "/tmp/pstrain-delta-bench-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);

  server::TableOptions options;
  options.name = "ads";
  options.dim = FLAGS_dim;
  options.seed = 1;
  options.track_changes = true;
  auto made = server::EmbeddingTable::Create(options);
  Check(made.status());
  server::EmbeddingTable& table = **made;
  std::mt19937_64 rng(7);
  {
    std::vector<uint64_t> keys;
    for (int64_t k = 0; k < FLAGS_rows; ++k) keys.push_back(static_cast<uint64_t>(k) * 7919);
    for (size_t at = 0; at < keys.size(); at += 65536) {
      Update(table, {keys.begin() + at, keys.begin() + std::min(keys.size(), at + 65536)}, 0);
    }
  }
  table.ForgetChanges();
  std::printf("table: %lld rows, dim %d, Adagrad; %.2f%% of the rows touched per cut\n\n",
              static_cast<long long>(table.num_rows()), FLAGS_dim, 100 * FLAGS_touched);
  std::printf("| round | kind | snapshot s | write s | read s | bytes |\n|---|---|---:|---:|---:|---:|\n");

  Timing whole, delta;
  int64_t step = 1;
  for (int round = 0; round < FLAGS_rounds; ++round) {
    // The rows this interval touches: random existing ones and a few new keys.
    const int64_t touched = static_cast<int64_t>(FLAGS_touched * FLAGS_rows);
    std::vector<uint64_t> keys;
    for (int64_t i = 0; i < touched; ++i) keys.push_back(static_cast<uint64_t>(rng() % FLAGS_rows) * 7919);
    for (int64_t i = 0; i < touched / 10; ++i)
      keys.push_back(static_cast<uint64_t>(FLAGS_rows + step * touched + i) * 7919);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    Update(table, keys, step);

    const std::string base_path = server::CheckpointPath(dir, 0, step);
    const std::string delta_path = server::CheckpointPath(dir, 0, step + 1);
    auto write_whole = [&] {
      server::ShardCheckpoint ckpt;
      ckpt.step = step;
      ckpt.tables.emplace_back();
      whole.snapshot.push_back(Seconds([&] { table.Serialize(&ckpt.tables[0]); }));
      whole.write.push_back(Seconds([&] { Check(server::WriteCheckpoint(base_path, ckpt)); }));
      whole.bytes.push_back(server::CheckpointFileSize(ckpt));
    };
    auto write_delta = [&] {
      server::ShardCheckpoint ckpt;
      ckpt.step = step + 1;  // a delta on the whole file of `step`, which holds the same cut
      ckpt.base_step = step;
      ckpt.tables.emplace_back();
      delta.snapshot.push_back(Seconds([&] { table.SerializeDelta(&ckpt.tables[0]); }));
      delta.write.push_back(Seconds([&] { Check(server::WriteCheckpoint(delta_path, ckpt)); }));
      delta.bytes.push_back(server::CheckpointFileSize(ckpt));
    };
    // The chain read back below is this delta on this round's whole file, which already holds its
    // rows (so the merge gives the whole file's table again): a merge of a real chain's sizes.
    if (round % 2 == 0) {
      write_whole();
      write_delta();
    } else {
      write_delta();
      write_whole();
    }
    table.ForgetChanges();
    whole.read.push_back(Seconds([&] { Check(server::ReadCheckpoint(base_path).status()); }));
    delta.read.push_back(Seconds([&] { Check(server::ReadCheckpointChain(dir, 0, step + 1).status()); }));
    for (const auto* t : {&whole, &delta}) {
      std::printf("| %d | %s | %.4f | %.4f | %.4f | %lld |\n", round, t == &whole ? "whole" : "delta",
                  t->snapshot.back(), t->write.back(), t->read.back(), static_cast<long long>(t->bytes.back()));
    }
    std::filesystem::remove(base_path);
    std::filesystem::remove(delta_path);
    step += 2;
  }
  const double ws = Median(whole.snapshot), ds = Median(delta.snapshot);
  const double ww = Median(whole.write), dw = Median(delta.write);
  const double wr = Median(whole.read), dr = Median(delta.read);
  const double wb = static_cast<double>(whole.bytes.back()), db = static_cast<double>(delta.bytes.back());
  std::printf("\nmedians over %d rounds:\n\n", FLAGS_rounds);
  std::printf("| | whole | delta | delta / whole |\n|---|---:|---:|---:|\n");
  std::printf("| bytes | %.0f | %.0f | %.4f |\n", wb, db, db / wb);
  std::printf("| snapshot (under the store's lock) s | %.4f | %.4f | %.4f |\n", ws, ds, ds / ws);
  std::printf("| write (file, fsync, rename) s | %.4f | %.4f | %.4f |\n", ww, dw, dw / ww);
  std::printf("| snapshot + write s | %.4f | %.4f | %.4f |\n", ws + ww, ds + dw, (ds + dw) / (ws + ww));
  std::printf("| read back s (whole file; the chain: whole + delta, merged) | %.4f | %.4f | %.4f |\n", wr, dr, dr / wr);
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return pstrain::bench::Main();
}
