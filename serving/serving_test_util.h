// Two parameter stores of a small job with one embedding table, trained in process and
// checkpointed as a chain (a base every 3 cuts), for the serving tests: what a job's checkpoint
// folder holds, without processes.
#ifndef PSTRAIN_SERVING_SERVING_TEST_UTIL_H_
#define PSTRAIN_SERVING_SERVING_TEST_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/key_hash.h"
#include "common/sparse_rows.h"
#include "gtest/gtest.h"
#include "model/param_spec.h"
#include "server/store_test_util.h"
#include "serving/checkpoint_export.h"

namespace pstrain::serving::test {

using namespace server::store_test;  // NOLINT: the shared helpers of the store tests

inline constexpr int kDim = 3;

inline std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "export-" + name + "-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// fc1.weight {4, 5} on server 0, fc1.bias {5} on server 1; one table "ads" (dim 3, fp16 rows);
// ASYNC with one worker, a checkpoint every 2 updates, a base every 3; with `ttl_updates` > 0 rows
// not updated in that many updates leave (checked every update).
inline server::ParameterStore::Options Options(int rank, const std::string& dir, int64_t ttl_updates = 0) {
  server::ParameterStore::Options options =
      MakeOptions(ASYNC, 1, MakeShardMap({Chunk(0, 0, 20, 0), Chunk(1, 0, 5, 1)}));
  options.rank = rank;
  options.job.set_num_servers(2);
  TableSpec* t = options.job.add_tables();
  t->set_name("ads");
  t->set_dim(kDim);
  t->set_row_dtype(TableSpec::FP16);
  t->mutable_optimizer()->set_type(SparseOptimizerSpec::ADAGRAD);
  t->mutable_optimizer()->set_lr(0.5f);
  if (ttl_updates > 0) {
    t->mutable_eviction()->set_ttl_updates(ttl_updates);
    t->mutable_eviction()->set_every_updates(1);
  }
  options.job.set_checkpoint_dir(dir);
  options.job.set_checkpoint_every_steps(2);
  options.job.set_full_checkpoint_every(3);
  return options;
}

inline std::vector<model::ParamSpec> Params() {
  std::vector<model::ParamSpec> params(2);
  params[0].name = "fc1.weight";
  params[0].shape = {4, 5};
  params[0].num_elements = 20;
  params[1].name = "fc1.bias";
  params[1].shape = {5};
  params[1].num_elements = 5;
  params[1].flat_offset = 20;
  return params;
}

struct Servers {
  std::string dir;
  std::vector<std::unique_ptr<server::ParameterStore>> stores;
  std::vector<uint64_t> keys;  // every key pushed, ascending
  int64_t ttl_updates = 0;
};

// One update on both servers: each server's dense chunk, and rows of the keys it owns of
// {k * 1000 + step % 3 : k = 1..12}. Adds the keys to s->keys (kept ascending and unique).
inline void PushStep(Servers* s, int64_t step) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 12; ++k) keys.push_back(k * 1000 + static_cast<uint64_t>(step % 3));
  for (int rank = 0; rank < 2; ++rank) {
    PushRequest req = MakePush(0, step, 1, Filled(0.1f * step, 0.01f));
    req.mutable_chunks()->DeleteSubrange(rank == 0 ? 1 : 0, 1);  // only this server's tensor
    std::vector<uint64_t> mine;
    for (uint64_t k : keys) {
      if (ServerOfKey(k, 2) == rank) mine.push_back(k);
    }
    SparseRows* rows = req.add_sparse();
    SetKeys(0, mine, rows);
    std::vector<float> grads(mine.size() * kDim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.05f * static_cast<float>(i % 5) - 0.1f;
    SetRows(grads, rows);
    const absl::Status pushed = PushNow(*s->stores[rank], req);
    EXPECT_TRUE(pushed.ok()) << pushed;
  }
  s->keys.insert(s->keys.end(), keys.begin(), keys.end());
  std::sort(s->keys.begin(), s->keys.end());
  s->keys.erase(std::unique(s->keys.begin(), s->keys.end()), s->keys.end());
}

// `steps` updates on both servers (with 7: cuts at 2, 4, 6: a base, then deltas).
inline Servers Train(const std::string& name, int64_t steps = 7, int64_t ttl_updates = 0) {
  Servers s;
  s.dir = Dir(name);
  s.ttl_updates = ttl_updates;
  for (int rank = 0; rank < 2; ++rank) s.stores.push_back(MakeStore(Options(rank, s.dir, ttl_updates)));
  for (int64_t step = 0; step < steps; ++step) PushStep(&s, step);
  return s;
}

inline CheckpointExportOptions ExportOptions(const Servers& s) {
  CheckpointExportOptions options;
  options.checkpoint_dir = s.dir;
  options.job = Options(0, s.dir, s.ttl_updates).job;
  options.params = Params();
  return options;
}

}  // namespace pstrain::serving::test

#endif  // PSTRAIN_SERVING_SERVING_TEST_UTIL_H_
