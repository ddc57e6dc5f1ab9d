#include "server/store_request.h"

namespace pstrain::server {
namespace {

std::vector<PayloadView> DataOf(const PushRequest& req) {
  std::vector<PayloadView> views;
  views.reserve(req.chunks_size());
  for (const TensorChunk& c : req.chunks()) views.emplace_back(c.data());
  return views;
}

}  // namespace

InMemoryPush::InMemoryPush(const PushRequest& req)
    : own_values_(DataOf(req)),
      rows_(RowsOf(req.sparse())),
      pull_keys_(RowsOf(req.pull_sparse())),
      decoded_{req, own_values_, rows_, pull_keys_} {}

InMemoryPush::InMemoryPush(const PushRequest& req, absl::Span<const PayloadView> values)
    : rows_(RowsOf(req.sparse())), pull_keys_(RowsOf(req.pull_sparse())), decoded_{req, values, rows_, pull_keys_} {}

InMemoryPull::InMemoryPull(const PullRequest& req) : keys_(RowsOf(req.sparse())), decoded_{req, keys_} {}

}  // namespace pstrain::server
