// A client of pstrain-serve (proto/serving.proto): what tests, the serving benchmark and the
// Python package's ServeClient use. Values come back as float32, row after row.
//
// Thread safety: thread-safe (one gRPC channel; calls may run concurrently).
#ifndef PSTRAIN_SERVING_SERVE_CLIENT_H_
#define PSTRAIN_SERVING_SERVE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/transport_security.h"
#include "proto/serving.grpc.pb.h"

namespace pstrain::serving {

struct LookupResult {
  int64_t step = 0;  // the cut every value comes from
  int32_t dim = 0;
  std::vector<float> values;  // keys x dim
  std::vector<bool> found;    // false: the key's initial value (no row)
};

struct PredictResult {
  int64_t step = 0;
  std::vector<float> probabilities;
};

class ServeClient {
 public:
  // A channel to `address` (host:port) secured by `security` (null: plaintext, loopback only), each
  // call bounded by `timeout`. With TLS the peer must present the job's serving certificate.
  static absl::StatusOr<std::unique_ptr<ServeClient>> Create(const std::string& address, absl::Duration timeout,
                                                             std::shared_ptr<const TransportSecurity> security);

  // The errors are the server's (proto/serving.proto), with the method and address in front.
  absl::StatusOr<LookupResult> Lookup(const std::string& table, absl::Span<const uint64_t> keys);
  absl::StatusOr<PredictResult> Predict(const std::vector<std::string>& records);
  absl::StatusOr<ModelInfo> GetModelInfo();

 private:
  ServeClient(std::string address, absl::Duration timeout, std::unique_ptr<Serving::Stub> stub)
      : address_(std::move(address)), timeout_(timeout), stub_(std::move(stub)) {}

  const std::string address_;
  const absl::Duration timeout_;
  std::unique_ptr<Serving::Stub> stub_;
};

}  // namespace pstrain::serving

#endif  // PSTRAIN_SERVING_SERVE_CLIENT_H_
