#include "launch/status_source.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "transport/grpc_status.h"
#include "proto/scheduler.grpc.pb.h"

namespace pstrain {
namespace launch {
namespace {

class SchedulerStatusSource : public JobStatusSource {
 public:
  SchedulerStatusSource(const std::string& address, absl::Duration deadline, const TransportSecurity& security)
      : address_(address),
        deadline_(deadline),
        stub_(Scheduler::NewStub(security.NewChannel(address, grpc::ChannelArguments(), CertRole::kScheduler))) {}

  absl::StatusOr<JobStatus> Get() override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline_));
    JobStatus status;
    grpc::Status s = stub_->GetJobStatus(&context, JobStatusRequest(), &status);
    if (!s.ok()) return FromGrpcStatus(s, absl::StrCat("GetJobStatus from scheduler at ", address_));
    return status;
  }

 private:
  const std::string address_;
  const absl::Duration deadline_;
  const std::unique_ptr<Scheduler::Stub> stub_;
};

}  // namespace

std::unique_ptr<JobStatusSource> NewSchedulerStatusSource(const std::string& address, absl::Duration deadline,
                                                          std::shared_ptr<const TransportSecurity> security) {
  if (security == nullptr) security = TransportSecurity::Loopback();
  return std::make_unique<SchedulerStatusSource>(address, deadline, *security);
}

}  // namespace launch
}  // namespace pstrain
