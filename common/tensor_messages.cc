#include "common/tensor_messages.h"

#include <string>

namespace pstrain {

namespace {

void CopyRows(const IncomingRows& in, SparseRows* out) {
  out->set_table_id(in.table_id);
  std::string* keys = out->mutable_keys();
  keys->resize(in.keys.size());
  in.keys.CopyTo(keys->data());
  std::string* rows = out->mutable_rows();
  rows->resize(in.rows.size());
  in.rows.CopyTo(rows->data());
}

void CopyRows(const OutgoingRows& in, SparseRows* out) {
  out->set_table_id(in.table_id);
  out->set_keys(in.keys.data(), in.keys.size());
  out->set_rows(in.rows.data(), in.rows.size());
}

}  // namespace

std::vector<IncomingRows> RowsOf(const google::protobuf::RepeatedPtrField<SparseRows>& list) {
  std::vector<IncomingRows> views(list.size());
  for (int i = 0; i < list.size(); ++i) {
    views[i].table_id = list.Get(i).table_id();
    if (!list.Get(i).keys().empty()) views[i].keys.Append(list.Get(i).keys());
    if (!list.Get(i).rows().empty()) views[i].rows.Append(list.Get(i).rows());
  }
  return views;
}

std::vector<IncomingRows> SparseOf(const IncomingPull& pull) {
  if (pull.header.sparse_size() == 0) return pull.sparse;
  std::vector<IncomingRows> views = RowsOf(pull.header.sparse());
  views.insert(views.end(), pull.sparse.begin(), pull.sparse.end());
  return views;
}

void ReleaseValues(IncomingPull* pull) {
  pull->values.clear();
  pull->sparse.clear();
  pull->bytes.reset();
}

PushRequest Materialize(const OutgoingPush& push) {
  PushRequest request = push.header;
  for (int i = 0; i < request.chunks_size(); ++i) {
    request.mutable_chunks(i)->set_data(push.values[i].data(), push.values[i].size());
  }
  for (const OutgoingRows& rows : push.sparse) CopyRows(rows, request.add_sparse());
  for (const OutgoingRows& rows : push.pull_sparse) CopyRows(rows, request.add_pull_sparse());
  return request;
}

PullResponse Materialize(const IncomingPull& pull) {
  PullResponse response = pull.header;
  for (int i = 0; i < response.chunks_size(); ++i) {
    std::string* data = response.mutable_chunks(i)->mutable_data();
    data->resize(pull.values[i].size());
    pull.values[i].CopyTo(data->data());
  }
  for (const IncomingRows& rows : pull.sparse) CopyRows(rows, response.add_sparse());
  return response;
}

OutgoingPush ViewOf(const PushRequest& request) {
  OutgoingPush push;
  push.header = request;
  for (int i = 0; i < request.chunks_size(); ++i) {
    push.header.mutable_chunks(i)->clear_data();
    push.values.push_back(request.chunks(i).data());
  }
  return push;
}

}  // namespace pstrain
