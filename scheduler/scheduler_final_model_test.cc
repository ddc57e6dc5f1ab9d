// The final model reaches the scheduler (SubmitFinalModel) and the job finishes only once it is
// written.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"

namespace pstrain::scheduler {
namespace {

using ::testing::HasSubstr;
using test_util::DoneReport;
using test_util::Reg;
using test_util::TinyJobOptions;

// A 1-server, 2-worker job with a final_model_path whose "file" is `written_` and whose check
// refuses anything but "MODEL".
class FinalModelTest : public ::testing::Test {
 protected:
  std::unique_ptr<Scheduler> Make() {
    JobSpec job;
    job.set_num_servers(1);
    job.set_num_workers(2);
    job.set_epochs(1);
    job.set_batch_size(10);
    job.set_eval_last_epoch_only(true);
    job.set_final_model_path("final.model");
    Scheduler::Options options = TinyJobOptions(job, 8, 50, 0, 3, [this] { return now_; });
    options.write_final_model = [this](absl::string_view bytes) -> absl::Status {
      if (bytes != "MODEL") return absl::InvalidArgumentError("bad magic (not a model file)");
      written_.emplace_back(bytes);
      return absl::OkStatus();
    };
    auto s = Scheduler::Create(options);
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE((*s)->Register(Reg(SERVER, "h:1")).ok());
    EXPECT_TRUE((*s)->Register(Reg(WORKER, "h:2")).ok());
    EXPECT_TRUE((*s)->Register(Reg(WORKER, "h:3")).ok());
    EXPECT_EQ((*s)->state(), RUNNING);
    return std::move(s).value();
  }

  static ProgressReport Done(int rank) { return DoneReport(rank); }

  static FinalModel Model(int rank, const std::string& bytes) {
    FinalModel m;
    m.set_worker_rank(rank);
    m.set_model_file(bytes);
    return m;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::vector<std::string> written_;
};

TEST_F(FinalModelTest, TheJobFinishesWithTheLastReportAfterTheModelIsWritten) {
  auto s = Make();
  ASSERT_TRUE(s->ReportProgress(Done(1)).ok());
  ASSERT_TRUE(s->SubmitFinalModel(Model(0, "MODEL")).ok());
  EXPECT_EQ(s->state(), RUNNING);
  ASSERT_TRUE(s->ReportProgress(Done(0)).ok());
  EXPECT_EQ(s->state(), FINISHED);
  EXPECT_THAT(written_, ::testing::ElementsAre("MODEL"));
  // A retry (or a second sender) writes nothing more.
  ASSERT_TRUE(s->SubmitFinalModel(Model(1, "MODEL")).ok());
  EXPECT_EQ(written_.size(), 1u);
}

TEST_F(FinalModelTest, ACorruptModelIsRefusedAndFailsTheJob) {
  auto s = Make();
  absl::Status status = s->SubmitFinalModel(Model(0, "GARBAGE"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("final model from worker 0 (7 bytes): bad magic"));
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_THAT(s->failure().message(), HasSubstr("final model from worker 0"));
  EXPECT_TRUE(written_.empty());
}

TEST_F(FinalModelTest, EveryWorkerDoneWithoutAModelFailsTheJob) {
  auto s = Make();
  ASSERT_TRUE(s->ReportProgress(Done(1)).ok());
  // Worker 0, which holds the model, leaves before sending it.
  LeaveRequest leave;
  leave.set_role(WORKER);
  leave.set_rank(0);
  ASSERT_TRUE(s->Leave(leave).ok());
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_THAT(s->failure().message(), HasSubstr("none sent the final model for final.model"));
}

TEST_F(FinalModelTest, UnknownSendersAndJobsWithoutAPathAreRefused) {
  auto s = Make();
  EXPECT_EQ(s->SubmitFinalModel(Model(7, "MODEL")).code(), absl::StatusCode::kFailedPrecondition);
  JobSpec job;
  job.set_num_servers(1);
  job.set_num_workers(1);
  auto plain = Scheduler::Create(TinyJobOptions(job, 8, 50, 40, 3, [this] { return now_; }));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->SubmitFinalModel(Model(0, "MODEL")).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pstrain::scheduler
