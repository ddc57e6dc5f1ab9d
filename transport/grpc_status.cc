#include "transport/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pstrain {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context) {
  if (status.ok()) return absl::OkStatus();
  auto code = static_cast<absl::StatusCode>(status.error_code());
  if (context.empty()) return absl::Status(code, status.error_message());
  return absl::Status(code, absl::StrCat(context, ": ", status.error_message()));
}

}  // namespace pstrain
