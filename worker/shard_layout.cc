#include "worker/shard_layout.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace pstrain::worker {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tensor bytes travel as little-endian float32");

absl::StatusOr<ShardLayout> ShardLayout::Create(const ShardMap& map, int num_servers,
                                                const std::vector<model::ParamSpec>& params) {
  if (map.tensors_size() != static_cast<int>(params.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard map has ", map.tensors_size(), " tensors, the model has ", params.size()));
  }
  ShardLayout layout;
  for (int i = 0; i < map.tensors_size(); ++i) {
    const TensorSpec& t = map.tensors(i);
    const model::ParamSpec& p = params[i];
    if (t.id() != i || t.name() != p.name || t.num_elements() != p.num_elements) {
      return absl::InvalidArgumentError(absl::StrCat("shard map tensor ", i, " is '", t.name(), "' with ",
                                                     t.num_elements(), " elements, the model's is '", p.name, "' with ",
                                                     p.num_elements));
    }
    layout.tensor_names_.push_back(p.name);
  }
  layout.per_server_.resize(num_servers);
  for (const ChunkSpec& c : map.chunks()) {
    if (c.server_rank() < 0 || c.server_rank() >= num_servers) {
      return absl::InvalidArgumentError(absl::StrCat("shard map chunk of tensor ", c.tensor_id(), " names server ",
                                                     c.server_rank(), ", the job has ", num_servers));
    }
    if (c.tensor_id() < 0 || c.tensor_id() >= map.tensors_size() || c.offset() < 0 || c.length() <= 0 ||
        c.offset() + c.length() > params[c.tensor_id()].num_elements) {
      return absl::InvalidArgumentError(absl::StrCat("shard map chunk (tensor ", c.tensor_id(), ", offset ", c.offset(),
                                                     ", length ", c.length(), ") lies outside the model"));
    }
    layout.per_server_[c.server_rank()].push_back(
        {c.tensor_id(), c.offset(), c.length(), params[c.tensor_id()].flat_offset + c.offset()});
  }
  return layout;
}

ShardLayout::ChunkRun ShardLayout::RunOfTensors(int server, int first_tensor, int end_tensor) const {
  const std::vector<ChunkRef>& refs = per_server_[server];
  ChunkRun run;
  while (run.first < static_cast<int>(refs.size()) && refs[run.first].tensor_id < first_tensor) ++run.first;
  while (run.first + run.count < static_cast<int>(refs.size()) && refs[run.first + run.count].tensor_id < end_tensor) {
    ++run.count;
  }
  return run;
}

void ShardLayout::FillPush(int server, const float* flat_grad, OutgoingPush* request) const {
  FillChunks(server, {0, static_cast<int>(per_server_[server].size())}, flat_grad, request);
  request->header.set_partial(false);
  request->header.set_first_chunk(0);
}

void ShardLayout::FillPartialPush(int server, ChunkRun run, const float* flat_grad, OutgoingPush* request) const {
  FillChunks(server, run, flat_grad, request);
  request->header.set_partial(true);
  request->header.set_first_chunk(run.first);
}

void ShardLayout::FillChunks(int server, ChunkRun run, const float* flat_grad, OutgoingPush* request) const {
  const std::vector<ChunkRef>& refs = per_server_[server];
  PushRequest& header = request->header;
  // Keep existing chunk messages from the previous step.
  while (header.chunks_size() > run.count) header.mutable_chunks()->RemoveLast();
  while (header.chunks_size() < run.count) header.add_chunks();
  request->values.resize(run.count);
  for (int i = 0; i < run.count; ++i) {
    const ChunkRef& ref = refs[run.first + i];
    TensorChunk* chunk = header.mutable_chunks(i);
    chunk->set_tensor_id(ref.tensor_id);
    chunk->set_offset(ref.offset);
    chunk->set_length(ref.length);
    request->values[i] = Floats(flat_grad + ref.flat_offset, ref.length);
  }
}

absl::Status ShardLayout::ApplyPull(int server, const IncomingPull& response, float* flat_weights) const {
  return ApplyPartialPull(server, {0, static_cast<int>(per_server_[server].size())}, response, flat_weights);
}

absl::Status ShardLayout::ApplyPartialPull(int server, ChunkRun run, const IncomingPull& response,
                                           float* flat_weights) const {
  const std::vector<ChunkRef>& refs = per_server_[server];
  if (response.header.chunks_size() != run.count) {
    return absl::DataLossError(absl::StrCat("pull from server ", server, ": got ", response.header.chunks_size(),
                                            " chunks, expected ", run.count));
  }
  for (int j = 0; j < run.count; ++j) {
    const int i = run.first + j;
    const ChunkRef& ref = refs[i];
    const TensorChunk& chunk = response.header.chunks(j);
    const PayloadView& data = response.values[j];
    if (chunk.tensor_id() != ref.tensor_id || chunk.offset() != ref.offset || chunk.length() != ref.length ||
        data.size() != static_cast<size_t>(ref.length) * sizeof(float)) {
      return absl::DataLossError(absl::StrCat("pull from server ", server, ": chunk ", i, " is (tensor ",
                                              chunk.tensor_id(), ", offset ", chunk.offset(), ", ", data.size(),
                                              " bytes), expected (tensor '", tensor_names_[ref.tensor_id], "', offset ",
                                              ref.offset, ", ", ref.length * sizeof(float), " bytes)"));
    }
    data.CopyTo(flat_weights + ref.flat_offset);
  }
  return absl::OkStatus();
}

}  // namespace pstrain::worker
