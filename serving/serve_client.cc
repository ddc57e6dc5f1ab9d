#include "serving/serve_client.h"

#include <cstring>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "transport/grpc_status.h"

namespace pstrain::serving {
namespace {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServeClient>> ServeClient::Create(const std::string& address, absl::Duration timeout,
                                                                 std::shared_ptr<const TransportSecurity> security) {
  if (address.empty()) return absl::InvalidArgumentError("serving address is empty, expected host:port");
  if (security == nullptr) security = TransportSecurity::Loopback();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  std::shared_ptr<grpc::Channel> channel = security->NewChannel(address, args, CertRole::kServing);
  return std::unique_ptr<ServeClient>(new ServeClient(address, timeout, Serving::NewStub(channel)));
}

absl::StatusOr<LookupResult> ServeClient::Lookup(const std::string& table, absl::Span<const uint64_t> keys) {
  LookupRequest request;
  request.set_table(table);
  request.mutable_keys()->Add(keys.begin(), keys.end());
  LookupResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, timeout_);
  const grpc::Status status = stub_->Lookup(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, absl::StrCat("Lookup at ", address_));
  const size_t expected = keys.size() * static_cast<size_t>(response.dim()) * sizeof(float);
  if (response.dim() < 1 || response.values().size() != expected ||
      response.found_size() != static_cast<int>(keys.size())) {
    return absl::DataLossError(absl::StrCat("Lookup at ", address_, ": ", response.values().size(),
                                            " bytes of values and ", response.found_size(), " flags for ", keys.size(),
                                            " keys of dim ", response.dim()));
  }
  LookupResult out;
  out.step = response.step();
  out.dim = response.dim();
  out.values.resize(keys.size() * static_cast<size_t>(response.dim()));
  std::memcpy(out.values.data(), response.values().data(), expected);
  out.found.assign(response.found().begin(), response.found().end());
  return out;
}

absl::StatusOr<PredictResult> ServeClient::Predict(const std::vector<std::string>& records) {
  PredictRequest request;
  for (const std::string& r : records) request.add_records(r);
  PredictResponse response;
  grpc::ClientContext context;
  SetDeadline(&context, timeout_);
  const grpc::Status status = stub_->Predict(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, absl::StrCat("Predict at ", address_));
  PredictResult out;
  out.step = response.step();
  out.probabilities.assign(response.probabilities().begin(), response.probabilities().end());
  return out;
}

absl::StatusOr<ModelInfo> ServeClient::GetModelInfo() {
  ModelInfo info;
  grpc::ClientContext context;
  SetDeadline(&context, timeout_);
  const grpc::Status status = stub_->GetModelInfo(&context, ModelInfoRequest(), &info);
  if (!status.ok()) return FromGrpcStatus(status, absl::StrCat("GetModelInfo at ", address_));
  return info;
}

}  // namespace pstrain::serving
