// A ParameterStore for a small job, the one the server-side fuzz targets feed: two dense tensors
// ("fc1.weight" {4, 5} in two chunks, "fc1.bias" {5}; 25 floats) and one embedding table ("user",
// dim 2), 2 workers at membership epoch 4. Small, so a fresh store per input is cheap and every
// input runs from the same state (a crash replays exactly). Test-only.
#ifndef PSTRAIN_FUZZ_SMALL_STORE_H_
#define PSTRAIN_FUZZ_SMALL_STORE_H_

#include <cstdlib>
#include <memory>

#include "server/parameter_store.h"
#include "server/test_shard_map.h"

namespace pstrain::fuzz {

inline server::ParameterStore::Options SmallStoreOptions(Mode mode) {
  using server::store_test::Chunk;
  ShardMap map = server::store_test::MakeShardMap({Chunk(0, 0, 12, 0), Chunk(0, 12, 8, 0), Chunk(1, 0, 5, 0)});
  server::ParameterStore::Options options;
  options.rank = 0;
  options.job.set_mode(mode);
  options.job.set_num_servers(1);
  options.job.set_seed(7);
  options.job.mutable_optimizer()->set_type(OptimizerSpec::ADAM);
  options.job.mutable_optimizer()->set_lr(0.5f);
  TableSpec* t = options.job.add_tables();
  t->set_name("user");
  t->set_dim(2);
  t->mutable_optimizer()->set_type(SparseOptimizerSpec::ADAGRAD);
  t->mutable_optimizer()->set_lr(0.5f);
  options.shard_map = std::move(map);
  options.num_workers = 2;
  options.membership_epoch = 4;
  options.total_steps = 100;
  return options;
}

// The store, or abort: the options are fixed, so a failure is a bug in this file.
inline std::unique_ptr<server::ParameterStore> SmallStore(Mode mode) {
  auto store = server::ParameterStore::Create(SmallStoreOptions(mode));
  if (!store.ok()) std::abort();
  return std::move(store).value();
}

}  // namespace pstrain::fuzz

#endif  // PSTRAIN_FUZZ_SMALL_STORE_H_
