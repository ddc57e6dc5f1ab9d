#include "common/job_spec.h"

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

JobSpec Defaults() {
  JobSpec job;
  ApplyJobDefaults(&job);
  return job;
}

std::string WriteTemp(const std::string& text) {
  std::string path = testing::TempDir() + "/job_spec_test.textproto";
  std::ofstream(path) << text;
  return path;
}

TEST(JobSpecTest, DefaultsDescribeTheDemoJob) {
  JobSpec job = Defaults();
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  EXPECT_EQ(job.model(), "mlp");
  EXPECT_THAT(job.hidden_sizes(), testing::ElementsAre(256, 128));
  EXPECT_EQ(job.mode(), SYNC);
  EXPECT_EQ(job.num_servers(), 2);
  EXPECT_EQ(job.num_workers(), 2);
  EXPECT_EQ(job.optimizer().type(), OptimizerSpec::ADAM);
  EXPECT_FLOAT_EQ(job.optimizer().lr(), 0.002f);
  EXPECT_EQ(job.optimizer().schedule().type(), LrSchedule::COSINE);
  EXPECT_EQ(job.batch_size(), 256);
  EXPECT_EQ(job.data().data_dir(), kDefaultDataDir);
}

TEST(JobSpecTest, DefaultsKeepExplicitValues) {
  JobSpec job;
  job.mutable_optimizer()->set_type(OptimizerSpec::MOMENTUM);
  job.mutable_optimizer()->set_momentum(0.0f);  // Explicit zero must survive.
  job.set_batch_size(16);
  ApplyJobDefaults(&job);
  EXPECT_FLOAT_EQ(job.optimizer().momentum(), 0.0f);
  EXPECT_FLOAT_EQ(job.optimizer().lr(), 0.05f);
  EXPECT_EQ(job.batch_size(), 16);
}

TEST(JobSpecTest, EachModelHasItsOwnBatchAndEpochDefaults) {
  JobSpec cnn;
  cnn.set_model("cnn");
  ApplyJobDefaults(&cnn);
  EXPECT_TRUE(ValidateJobSpec(cnn).ok());
  EXPECT_EQ(cnn.batch_size(), 64);
  EXPECT_EQ(cnn.epochs(), 8);
  EXPECT_EQ(cnn.global_batch(), 64 * 2);  // follows the model's batch
  EXPECT_FLOAT_EQ(cnn.optimizer().lr(), 0.002f);

  JobSpec mlp = Defaults();
  EXPECT_EQ(mlp.batch_size(), 256);
  EXPECT_EQ(mlp.epochs(), 10);
  EXPECT_EQ(mlp.global_batch(), 256 * 2);

  // What the user sets wins over the model's defaults, and applying them again changes nothing.
  JobSpec explicit_cnn;
  explicit_cnn.set_model("cnn");
  explicit_cnn.set_batch_size(128);
  explicit_cnn.set_epochs(3);
  explicit_cnn.mutable_optimizer()->set_lr(0.001f);
  ApplyJobDefaults(&explicit_cnn);
  EXPECT_EQ(explicit_cnn.batch_size(), 128);
  EXPECT_EQ(explicit_cnn.epochs(), 3);
  EXPECT_FLOAT_EQ(explicit_cnn.optimizer().lr(), 0.001f);
  JobSpec again = explicit_cnn;
  ApplyJobDefaults(&again);
  EXPECT_EQ(again.SerializeAsString(), explicit_cnn.SerializeAsString());
}

TEST(JobSpecTest, AdamWDecaysByDefaultAndKeepsAnExplicitZero) {
  JobSpec job;
  job.mutable_optimizer()->set_type(OptimizerSpec::ADAMW);
  ApplyJobDefaults(&job);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  EXPECT_FLOAT_EQ(job.optimizer().weight_decay(), 0.01f);
  EXPECT_FLOAT_EQ(job.optimizer().lr(), 0.002f);
  EXPECT_FLOAT_EQ(job.optimizer().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(job.optimizer().epsilon(), 1e-8f);

  JobSpec none;
  none.mutable_optimizer()->set_type(OptimizerSpec::ADAMW);
  none.mutable_optimizer()->set_weight_decay(0.0f);
  ApplyJobDefaults(&none);
  EXPECT_FLOAT_EQ(none.optimizer().weight_decay(), 0.0f);

  // Other optimizers keep no decay when unset.
  EXPECT_FLOAT_EQ(Defaults().optimizer().weight_decay(), 0.0f);
  EXPECT_EQ(*ParseOptimizer("AdamW"), OptimizerSpec::ADAMW);
  EXPECT_EQ(OptimizerName(OptimizerSpec::ADAMW), "adamw");
}

TEST(JobSpecTest, ClipGradNormIsOffByDefaultAndMustBeFiniteAndNonNegative) {
  JobSpec job = Defaults();
  EXPECT_EQ(job.optimizer().clip_grad_norm(), 0.0f);
  EXPECT_TRUE(OverlapOn(job));
  job.mutable_optimizer()->set_clip_grad_norm(1.0f);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  EXPECT_FALSE(OverlapOn(job));  // clipping needs the whole gradient first
  job.mutable_optimizer()->set_clip_grad_norm(-0.5f);
  EXPECT_THAT(ValidateJobSpec(job).message(),
              HasSubstr("optimizer.clip_grad_norm: got -0.5, expected a finite value >= 0"));
  job.mutable_optimizer()->set_clip_grad_norm(std::numeric_limits<float>::infinity());
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("optimizer.clip_grad_norm: got inf"));
}

TEST(JobSpecTest, NegativeLearningRateIsRefusedWithFieldAndValue) {
  JobSpec job = Defaults();
  job.mutable_optimizer()->set_lr(-0.1f);
  absl::Status s = ValidateJobSpec(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("optimizer.lr: got -0.1, expected > 0"));
}

TEST(JobSpecTest, MaxWorkersDefaultsToTwoSparesAndMayNotBeBelowTheWorkers) {
  EXPECT_EQ(Defaults().max_workers(), 4);
  JobSpec job;
  job.set_num_workers(5);
  ApplyJobDefaults(&job);
  EXPECT_EQ(job.max_workers(), 7);
  job.set_max_workers(4);
  absl::Status status = ValidateJobSpec(job);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr("max_workers"));
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr(">= num_workers = 5"));
  job.set_max_workers(5);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
}

TEST(JobSpecTest, MaxServersIsZeroOrAtLeastTheServersAndGrowsOnlyASyncJobWithCheckpoints) {
  JobSpec job = Defaults();
  job.set_num_servers(2);
  job.set_max_servers(1);
  EXPECT_THAT(ValidateJobSpec(job).message(),
              HasSubstr("max_servers: got 1, expected 0 or in [num_servers = 2, 1024]"));
  job.set_max_servers(3);
  EXPECT_THAT(ValidateJobSpec(job).message(),
              HasSubstr("max_servers: got 3, expected a sync job with checkpoints and without replicas"));
  job.set_checkpoint_dir("ckpt");
  job.set_checkpoint_every_steps(10);
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  job.set_mode(ASYNC);
  EXPECT_FALSE(ValidateJobSpec(job).ok());
  job.set_max_servers(2);  // no growth: any job
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
}

TEST(JobSpecTest, ZeroWorkersIsRefused) {
  JobSpec job = Defaults();
  job.set_num_workers(-1);
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("num_workers: got -1"));
}

TEST(JobSpecTest, KeepCheckpointsIsTwoUnlessSetAndNeverFewer) {
  JobSpec job;
  ApplyJobDefaults(&job);
  EXPECT_EQ(KeptCheckpoints(job), 2);
  job.set_keep_checkpoints(7);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  EXPECT_EQ(KeptCheckpoints(job), 7);
  job.set_keep_checkpoints(1);
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("keep_checkpoints: got 1, expected 0 (2) or 2 to 100000"));
  job.set_keep_checkpoints(-3);
  EXPECT_EQ(ValidateJobSpec(job).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobSpecTest, ReplicasDefaultToOneAndTwoNeedTwoServers) {
  EXPECT_EQ(Defaults().replicas(), 1);
  JobSpec job = Defaults();
  job.set_replicas(2);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  job.set_num_servers(1);
  absl::Status s = ValidateJobSpec(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("replicas: got 2, expected 1 with num_servers = 1"));
  job = Defaults();
  job.set_replicas(3);
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("replicas: got 3, expected 1 or 2"));
}

TEST(JobSpecTest, ExternalModelMayPinTheDataSetSizes) {
  JobSpec job = Defaults();
  job.set_model("external");
  job.mutable_data()->set_train_samples(60000);
  job.mutable_data()->set_test_samples(0);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  EXPECT_TRUE(IsExternalModel(job));
  job.mutable_data()->set_test_samples(-1);
  absl::Status s = ValidateJobSpec(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("data.test_samples: got -1, expected >= 0"));
}

TEST(JobSpecTest, BuiltInModelsRefusePinnedDataSetSizes) {
  JobSpec job = Defaults();
  job.mutable_data()->set_train_samples(100);
  absl::Status s = ValidateJobSpec(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("data.train_samples: got 100, expected 0 for model 'mlp'"));
  job = Defaults();
  job.set_model("cnn");
  job.mutable_data()->set_test_samples(5);
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("data.test_samples: got 5, expected 0 for model 'cnn'"));
  job = Defaults();
  job.set_model("torch");
  EXPECT_THAT(ValidateJobSpec(job).message(),
              HasSubstr("model: got 'torch', expected 'mlp', 'cnn', 'ctr' or 'external'"));
}

TEST(JobSpecTest, CompressionDefaultsToNoneAndIsChecked) {
  EXPECT_EQ(Defaults().compression(), "none");
  JobSpec job = Defaults();
  for (const char* good : {"fp16", "bf16", "topk:0.01", "topk:1"}) {
    job.set_compression(good);
    EXPECT_TRUE(ValidateJobSpec(job).ok()) << good;
  }
  job.set_compression("topk:0");
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("got 'topk:0', expected a ratio in (0, 1]"));
  job.set_compression("int8");
  absl::Status s = ValidateJobSpec(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("got 'int8', expected none, fp16, bf16 or topk:RATIO"));
}

TEST(JobSpecTest, TheFmInteractionIsTheCtrModelsOnly) {
  JobSpec job = Defaults();  // model "mlp"
  job.set_ctr_interaction(JobSpec::CTR_INTERACTION_FM);
  absl::Status s = ValidateJobSpec(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("ctr_interaction (--ctr_interaction): got CTR_INTERACTION_FM, expected NONE for "
                                     "model 'mlp'"));
  JobSpec ctr;
  ctr.set_model("ctr");
  ctr.set_ctr_interaction(JobSpec::CTR_INTERACTION_FM);
  ApplyJobDefaults(&ctr);
  EXPECT_TRUE(ValidateJobSpec(ctr).ok()) << ValidateJobSpec(ctr);
  ctr.set_ctr_interaction(static_cast<JobSpec::CtrInteraction>(7));
  EXPECT_THAT(ValidateJobSpec(ctr).message(), HasSubstr("ctr_interaction: got 7, expected NONE or FM"));
}

TEST(JobSpecTest, StepScheduleNeedsAStepSize) {
  JobSpec job = Defaults();
  job.mutable_optimizer()->mutable_schedule()->set_type(LrSchedule::STEP);
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("step_size"));
}

TEST(JobSpecTest, UnknownNamesListTheAcceptedOnes) {
  EXPECT_EQ(*ParseMode("SSP"), SSP);
  EXPECT_THAT(ParseMode("fast").status().message(), HasSubstr("expected sync, async or ssp"));
  EXPECT_EQ(*ParseOptimizer("nesterov"), OptimizerSpec::NESTEROV);
  EXPECT_THAT(ParseOptimizer("lion").status().message(),
              HasSubstr("got 'lion', expected sgd, momentum, nesterov, adam, adamw or adagrad"));
  EXPECT_EQ(*ParseLrSchedule("cosine"), LrSchedule::COSINE);
}

TEST(JobSpecTest, ReadsTextprotoFile) {
  std::string path = WriteTemp("mode: SSP\nstaleness: 3\nbatch_size: 32\noptimizer { type: SGD lr: 0.1 }\n");
  absl::StatusOr<JobSpec> job = ReadJobSpecFile(path);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->mode(), SSP);
  EXPECT_EQ(job->staleness(), 3);
  EXPECT_EQ(job->optimizer().type(), OptimizerSpec::SGD);
}

TEST(JobSpecTest, SyntaxErrorNamesFileAndLine) {
  std::string path = WriteTemp("mode: SYNC\nbatch_sise: 3\n");
  absl::Status s = ReadJobSpecFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("line 2"));
  EXPECT_THAT(s.message(), HasSubstr("batch_sise"));
}

TEST(JobSpecTest, MissingFileIsNotFound) {
  EXPECT_EQ(ReadJobSpecFile("/nonexistent/job.textproto").status().code(), absl::StatusCode::kNotFound);
}

TEST(JobSpecTest, ConfigMustBeARegularFile) {
  for (const std::string& path : {testing::TempDir(), std::string("/dev/zero")}) {
    absl::Status s = ReadJobSpecFile(path, "--config (job config)").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << path;
    EXPECT_THAT(s.message(), HasSubstr("--config (job config): '" + path + "' is a ")) << path;
    EXPECT_THAT(s.message(), HasSubstr("expected a regular file")) << path;
  }
}

TEST(JobSpecTest, ModelSizeIsBoundedBeforeAnythingIsAllocated) {
  JobSpec job = Defaults();
  job.set_hidden_sizes(0, kMaxHiddenWidth + 1);
  EXPECT_THAT(ValidateJobSpec(job).message(),
              HasSubstr("hidden_sizes[0] (--hidden): got 1048577, expected in [1, 1048576]"));
  job.set_hidden_sizes(0, 40000);
  job.set_hidden_sizes(1, 40000);  // 1.6e9 weights between them
  EXPECT_THAT(ValidateJobSpec(job).message(),
              HasSubstr("hidden_sizes (--hidden): got 40000,40000: 1600000000 weights between the hidden layers "
                        "alone, expected a model of at most 1073741824 parameters"));
  job.set_hidden_sizes(1, 20000);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
}

TEST(JobSpecTest, GradNormLimitIsOffByDefaultAndMustBeFiniteAndNonNegative) {
  JobSpec job = Defaults();
  EXPECT_EQ(job.max_grad_norm_per_sample(), 0);
  job.set_max_grad_norm_per_sample(50);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  job.set_max_grad_norm_per_sample(-1);
  EXPECT_THAT(ValidateJobSpec(job).message(),
              HasSubstr("max_grad_norm_per_sample: got -1, expected a finite value >= 0"));
  job.set_max_grad_norm_per_sample(std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(ValidateJobSpec(job).ok());
}

TEST(JobSpecTest, OutputModeIsPermissionBits) {
  JobSpec job = Defaults();
  job.set_output_mode(0640);
  EXPECT_TRUE(ValidateJobSpec(job).ok());
  job.set_output_mode(01777);
  EXPECT_THAT(ValidateJobSpec(job).message(), HasSubstr("output_mode (--output_mode): got 01777"));
}

}  // namespace
}  // namespace pstrain
