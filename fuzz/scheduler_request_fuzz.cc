// Each scheduler RPC's request validation (scheduler/scheduler.h), in process: a sequence of
// requests parsed from the fuzzed bytes as scheduler/scheduler_service.cc parses what it receives,
// fed to a fresh scheduler of a small 2-server, 2-worker job, with a fake clock the input can move
// (so roles die and the watchdog runs). A bad request must get an error status, never crash the
// scheduler or leave a state that its snapshot (what --state_dir persists) cannot encode.
//
// Input: byte 0 bit 0: an external model's job (DeclareModel applies) rather than a built-in one;
// bit 1: ASYNC rather than SYNC. Then frames (fuzz_util.h), tag % 14 picking the call; the body is
// the request's protobuf bytes (for the clock: seconds to move it by).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "fuzz/fuzz_util.h"
#include "model/model_file.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"
#include "scheduler/state_file.h"

namespace {

using pstrain::scheduler::Scheduler;

template <typename Message>
bool Parse(absl::string_view body, Message* message) {
  return message->ParseFromArray(body.data(), static_cast<int>(body.size()));
}

Scheduler::Options MakeOptions(uint8_t flags, const absl::Time* now) {
  pstrain::JobSpec job;
  job.set_num_workers(2);
  job.set_num_servers(2);
  job.set_mode(flags & 2 ? pstrain::ASYNC : pstrain::SYNC);
  job.set_batch_size(10);
  job.set_epochs(2);
  job.set_final_model_path("final.model");  // never written: write_final_model only checks the
                                            // model assembled from SubmitFinalShard's shards
  Scheduler::Options options;
  if (flags & 1) {
    job.set_model(pstrain::kExternalModel);
    job.set_max_chunk_bytes(16);
    pstrain::ApplyJobDefaults(&job);
    options.job = job;
    options.dead_after = absl::Seconds(3);
    options.clock = [now] { return *now; };
  } else {
    options = pstrain::scheduler::test_util::TinyJobOptions(job, 64, 100, 40, 20, [now] { return *now; });
  }
  options.persist = [](int64_t, const pstrain::SchedulerState& state) {
    // What a restart would read back must decode.
    if (!pstrain::scheduler::DecodeSchedulerState(pstrain::scheduler::EncodeSchedulerState(state), "persist").ok()) {
      __builtin_trap();
    }
    return absl::OkStatus();
  };
  options.write_final_model = [](absl::string_view bytes) {
    return pstrain::model::ParseModelFile(bytes, "final model").status();
  };
  options.save_declared_model = [](absl::string_view) { return absl::OkStatus(); };
  return options;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  absl::Time now = absl::FromUnixSeconds(1000);
  auto created = Scheduler::Create(MakeOptions(data[0], &now));
  if (!created.ok()) std::abort();
  std::unique_ptr<Scheduler> s = std::move(created).value();

  pstrain::fuzz::FrameReader frames(data + 1, size - 1);
  uint8_t tag;
  absl::string_view body;
  while (frames.Next(&tag, &body)) {
    switch (tag % 14) {
      case 0: {
        pstrain::RegisterRequest r;
        if (Parse(body, &r)) (void)s->Register(r);
        break;
      }
      case 1: {
        pstrain::HeartbeatRequest r;
        if (Parse(body, &r)) (void)s->Heartbeat(r);
        break;
      }
      case 2: {
        pstrain::BarrierRequest r;
        if (Parse(body, &r)) s->Barrier(r, [](absl::Status) {});
        break;
      }
      case 3: {
        pstrain::LeaseRequest r;
        if (Parse(body, &r)) (void)s->LeaseWork(r);
        break;
      }
      case 4: {
        pstrain::ProgressReport r;
        if (Parse(body, &r)) (void)s->ReportProgress(r);
        break;
      }
      case 5: {
        pstrain::FailureReport r;
        if (Parse(body, &r)) s->ReportFailure(r);
        break;
      }
      case 6: {
        pstrain::LeaveRequest r;
        if (Parse(body, &r)) (void)s->Leave(r);
        break;
      }
      case 7: {
        pstrain::CheckpointReport r;
        if (Parse(body, &r)) (void)s->ReportCheckpoints(r);
        break;
      }
      case 8: {
        pstrain::SlowStepReport r;
        if (Parse(body, &r)) (void)s->ReportSlowStep(r);
        break;
      }
      case 9: {
        pstrain::FinalModel r;
        if (Parse(body, &r)) (void)s->SubmitFinalModel(r);
        break;
      }
      case 10: {
        pstrain::ModelDeclaration r;
        if (Parse(body, &r)) (void)s->DeclareModel(r);
        break;
      }
      case 11:  // the read-only calls: GetClusterView, GetJobStatus, GetInitialModel
        s->WhenRunning([](absl::StatusOr<pstrain::ClusterView>) {});
        (void)s->View();
        (void)s->Status();
        (void)s->InitialModel();
        (void)s->SummaryJson();
        break;
      case 12:  // time passes: up to 255 s, then the watchdog's tick
        now += absl::Seconds(body.empty() ? 1 : static_cast<uint8_t>(body[0]));
        s->CheckHealth();
        break;
      case 13: {
        pstrain::FinalShard r;
        if (Parse(body, &r)) (void)s->SubmitFinalShard(r);
        break;
      }
    }
  }
  (void)s->Snapshot();
  return 0;
}
