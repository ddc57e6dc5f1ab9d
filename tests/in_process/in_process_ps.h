// PsApi (worker/ps_api.h) over parameter stores in this process: the servers of a unit-test
// cluster, without sockets. Calls go straight to server::ParameterStore, and their answers come
// back the way the gRPC client delivers them (IncomingPull views over bytes the answer owns), so a
// worker's logic cannot tell the difference, except through the faults a test injects:
//
//   Kill(server)           every later call to it fails UNAVAILABLE (a dead server)
//   fault rule             per call: fail it before it reaches the server (a dropped request),
//                          when the server answers (a lost answer: the update happened), or at
//                          once while the server still holds it (a connection reset while a
//                          sync step waits for the other workers)
//   delay                  every call reaches its server only after this long (real time), from
//                          another thread, so answers arrive out of order
//
// Cancellation (CancelGroup, CancelAll) ends the caller's side of a call at once, as gRPC does;
// the store may still complete it later, into the call's own buffers, which nobody reads.
//
// Thread-safe.
#ifndef PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_PS_H_
#define PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_PS_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/parameter_store.h"
#include "worker/ps_api.h"

namespace pstrain::in_process {

class InProcessPs : public worker::PsApi {
 public:
  // One call as the fault rule sees it. Exactly one of push and pull is set, except for
  // "FinishEpoch" (neither).
  struct CallInfo {
    std::string method;  // "Pull", "Push", "PushPull" or "FinishEpoch"
    int server = 0;
    const PushRequest* push = nullptr;
    const PullRequest* pull = nullptr;
  };
  struct Fault {
    enum When { kBeforeServer, kWhenServerAnswers, kWhileServerHolds };
    absl::Status status;  // what the caller gets
    When when = kBeforeServer;
  };
  using FaultRule = std::function<std::optional<Fault>(const CallInfo&)>;

  // `stores[r]` serves server rank r; borrowed, must outlive this object.
  explicit InProcessPs(std::vector<server::ParameterStore*> stores);
  // Waits for delayed calls still on their way.
  ~InProcessPs() override;

  void Kill(int server);
  void set_fault_rule(FaultRule rule);
  void set_delay(absl::Duration delay);
  // Calls of `method` started so far (faulty ones included).
  int64_t calls(const std::string& method) const;

  int num_servers() const override { return static_cast<int>(stores_.size()); }
  void UpdateServers(const ClusterView&) override {}
  void PullAsync(int server, const PullRequest* request, IncomingPull* response, Done done) override;
  void PushAsync(int server, const OutgoingPush* request, PushResponse* response, Done done,
                 const void* group = nullptr) override;
  void PushPullAsync(int server, const OutgoingPush* request, IncomingPull* response, Done done,
                     const void* group = nullptr) override;
  void FinishEpochAsync(int server, const FinishEpochRequest* request, FinishEpochResponse* response,
                        Done done) override;
  void CancelGroup(const void* group) override;
  void CancelAll(const std::string& reason) override;

 private:
  struct Call;
  // Registers a call, applies the fault rule and the delay, then runs `deliver` (which hands the
  // call to its store) unless the call failed first.
  void Start(const CallInfo& info, std::shared_ptr<Call> call, std::function<void()> deliver);
  // Ends the caller's side of `call` once: `finish` (copy the answer out) runs only for OK.
  void End(const std::shared_ptr<Call>& call, absl::Status status);

  const std::vector<server::ParameterStore*> stores_;

  mutable absl::Mutex mu_;
  FaultRule fault_rule_ ABSL_GUARDED_BY(mu_);
  absl::Duration delay_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int> dead_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> calls_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::shared_ptr<Call>> in_flight_ ABSL_GUARDED_BY(mu_);
  std::string cancelled_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> delayed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain::in_process

#endif  // PSTRAIN_TESTS_IN_PROCESS_IN_PROCESS_PS_H_
