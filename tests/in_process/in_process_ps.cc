#include "tests/in_process/in_process_ps.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain::in_process {
namespace {

// An answer's values, owned by the IncomingPull that views them.
struct OwnedFloats : ReceivedBytes {
  std::vector<float> values;
};

// Moves the store's answer (chunks without data, their values back to back in `values`) into
// the caller's IncomingPull, as the gRPC client would deliver it.
void DeliverPull(const PullResponse& answer, std::vector<float> values, IncomingPull* out) {
  auto bytes = std::make_unique<OwnedFloats>();
  bytes->values = std::move(values);
  out->header = answer;
  out->values.clear();
  size_t offset = 0;
  for (const TensorChunk& chunk : answer.chunks()) {
    const size_t n = static_cast<size_t>(chunk.length());
    out->values.emplace_back(Floats(bytes->values.data() + offset, static_cast<int64_t>(n)));
    offset += n;
  }
  out->bytes = std::move(bytes);
}

}  // namespace

struct InProcessPs::Call {
  Done done;
  const void* group = nullptr;
  bool ended = false;  // guarded by InProcessPs::mu_
  // The request as the store reads it, copied: a cancelled caller may free its own.
  PushRequest push;
  std::vector<std::string> push_bytes;
  std::vector<PayloadView> push_values;
  PullRequest pull;
  FinishEpochRequest finish_epoch;
  // The store's answer, into buffers of the call's own.
  PullResponse pull_answer;
  PushResponse push_answer;
  std::vector<float> answer_values;
  // Copies the answer into the caller's response; run only for an OK answer not yet ended.
  std::function<void()> finish;
  // Set by a fault after the server: what the caller gets instead of the server's answer.
  std::optional<absl::Status> lost_answer;
};

InProcessPs::InProcessPs(std::vector<server::ParameterStore*> stores) : stores_(std::move(stores)) {}

InProcessPs::~InProcessPs() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(delayed_);
  }
  for (std::thread& t : threads) t.join();
}

void InProcessPs::Kill(int server) {
  absl::MutexLock lock(&mu_);
  dead_.insert(server);
}

void InProcessPs::set_fault_rule(FaultRule rule) {
  absl::MutexLock lock(&mu_);
  fault_rule_ = std::move(rule);
}

void InProcessPs::set_delay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  delay_ = delay;
}

int64_t InProcessPs::calls(const std::string& method) const {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

void InProcessPs::End(const std::shared_ptr<Call>& call, absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (call->ended) return;
    call->ended = true;
    in_flight_.erase(call);
  }
  if (call->lost_answer.has_value()) status = *call->lost_answer;
  if (status.ok() && call->finish) call->finish();
  call->done(std::move(status));
}

void InProcessPs::Start(const CallInfo& info, std::shared_ptr<Call> call, std::function<void()> deliver) {
  std::optional<Fault> fault;
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    ++calls_[info.method];
    in_flight_.insert(call);
    if (!cancelled_.empty()) {
      fault = Fault{absl::CancelledError(cancelled_)};
    } else if (info.server < 0 || info.server >= num_servers() || dead_.contains(info.server)) {
      fault = Fault{absl::UnavailableError(absl::StrCat("server ", info.server, " is dead"))};
    } else if (fault_rule_) {
      fault = fault_rule_(info);
    }
    delay = delay_;
  }
  auto run = [this, call, fault, deliver = std::move(deliver)]() {
    if (fault.has_value() && fault->when == Fault::kBeforeServer) {
      End(call, fault->status);
      return;
    }
    // The server handles the call; the caller hears only the fault, when the server answers or
    // at once.
    if (fault.has_value()) call->lost_answer = fault->status;
    deliver();
    if (fault.has_value() && fault->when == Fault::kWhileServerHolds) End(call, fault->status);
  };
  if (delay <= absl::ZeroDuration()) {
    run();
    return;
  }
  absl::MutexLock lock(&mu_);
  delayed_.emplace_back([delay, run = std::move(run)]() {
    absl::SleepFor(delay);
    run();
  });
}

void InProcessPs::PullAsync(int server, const PullRequest* request, IncomingPull* response, Done done) {
  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  call->pull = *request;
  call->finish = [call = call.get(), response]() {
    DeliverPull(call->pull_answer, std::move(call->answer_values), response);
  };
  Start(CallInfo{"Pull", server, nullptr, &call->pull}, call, [this, server, call]() {
    server::ParameterStore* store = stores_[server];
    call->answer_values.resize(store->num_elements());
    const server::InMemoryPull pull(call->pull);
    store->Pull(pull.decoded(), server::PullAnswer{&call->pull_answer, call->answer_values.data()},
                [this, call](absl::Status s) { End(call, std::move(s)); });
  });
}

namespace {

// Copies an outgoing push into `call`'s own request (header and values).
template <typename CallT>
void CopyPush(const OutgoingPush& push, CallT* call) {
  // Materialize copies the sparse entries' keys and rows into the header's own, as protobuf would.
  call->push = push.header;
  if (!push.sparse.empty() || !push.pull_sparse.empty()) {
    OutgoingPush rows_only;
    rows_only.sparse = push.sparse;
    rows_only.pull_sparse = push.pull_sparse;
    const PushRequest rows = Materialize(rows_only);
    call->push.mutable_sparse()->MergeFrom(rows.sparse());
    call->push.mutable_pull_sparse()->MergeFrom(rows.pull_sparse());
  }
  call->push_bytes.clear();
  for (absl::string_view bytes : push.values) call->push_bytes.emplace_back(bytes);
  call->push_values.clear();
  for (const std::string& bytes : call->push_bytes) call->push_values.emplace_back(bytes);
}

}  // namespace

void InProcessPs::PushAsync(int server, const OutgoingPush* request, PushResponse* response, Done done,
                            const void* group) {
  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  call->group = group;
  CopyPush(*request, call.get());
  call->finish = [call = call.get(), response]() { *response = call->push_answer; };
  Start(CallInfo{"Push", server, &call->push, nullptr}, call, [this, server, call]() {
    const server::InMemoryPush push(call->push, call->push_values);
    stores_[server]->Push(push.decoded(), &call->push_answer,
                          [this, call](absl::Status s) { End(call, std::move(s)); });
  });
}

void InProcessPs::PushPullAsync(int server, const OutgoingPush* request, IncomingPull* response, Done done,
                                const void* group) {
  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  call->group = group;
  CopyPush(*request, call.get());
  call->finish = [call = call.get(), response]() {
    DeliverPull(call->pull_answer, std::move(call->answer_values), response);
  };
  Start(CallInfo{"PushPull", server, &call->push, nullptr}, call, [this, server, call]() {
    int64_t floats = 0;
    for (const TensorChunk& c : call->push.chunks()) floats += c.length();
    call->answer_values.resize(floats);
    const server::InMemoryPush push(call->push, call->push_values);
    stores_[server]->PushPull(push.decoded(), server::PullAnswer{&call->pull_answer, call->answer_values.data()},
                              [this, call](absl::Status s) { End(call, std::move(s)); });
  });
}

void InProcessPs::FinishEpochAsync(int server, const FinishEpochRequest* request, FinishEpochResponse* response,
                                   Done done) {
  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  call->finish_epoch = *request;
  Start(CallInfo{"FinishEpoch", server, nullptr, nullptr}, call,
        [this, server, call]() { End(call, stores_[server]->FinishEpoch(call->finish_epoch)); });
}

void InProcessPs::CancelGroup(const void* group) {
  std::vector<std::shared_ptr<Call>> cancel;
  {
    absl::MutexLock lock(&mu_);
    for (const std::shared_ptr<Call>& call : in_flight_) {
      if (call->group == group) cancel.push_back(call);
    }
  }
  for (const std::shared_ptr<Call>& call : cancel) End(call, absl::CancelledError("cancelled with its group"));
}

void InProcessPs::CancelAll(const std::string& reason) {
  std::vector<std::shared_ptr<Call>> cancel;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_.empty()) cancelled_ = reason.empty() ? "cancelled" : reason;
    cancel.assign(in_flight_.begin(), in_flight_.end());
  }
  for (const std::shared_ptr<Call>& call : cancel) End(call, absl::CancelledError(reason));
}

}  // namespace pstrain::in_process
