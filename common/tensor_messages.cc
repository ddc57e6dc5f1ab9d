#include "common/tensor_messages.h"

namespace pstrain {

void ReleaseValues(IncomingPull* pull) {
  pull->values.clear();
  pull->bytes.reset();
}

PushRequest Materialize(const OutgoingPush& push) {
  PushRequest request = push.header;
  for (int i = 0; i < request.chunks_size(); ++i) {
    request.mutable_chunks(i)->set_data(push.values[i].data(), push.values[i].size());
  }
  return request;
}

PullResponse Materialize(const IncomingPull& pull) {
  PullResponse response = pull.header;
  for (int i = 0; i < response.chunks_size(); ++i) {
    std::string* data = response.mutable_chunks(i)->mutable_data();
    data->resize(pull.values[i].size());
    pull.values[i].CopyTo(data->data());
  }
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
