// Declared models (JobSpec.model "external"): the first valid declaration of a live worker sets
// the job's model and sizes, later ones must match it, refused ones change nothing, the job runs
// only once a model is declared, and a restarted scheduler keeps the declaration; averaged
// tensors are checked, flagged in the shard map and compared like the rest; declared embedding
// tables are matched with the job's, or become the job's (in the view, across a restart).
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_file.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"

namespace pstrain::scheduler {
namespace {

using test_util::Reg;
using ::testing::HasSubstr;

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
};

// The model file of `tensors`, every value `value` (element i of the model: value + i).
std::string ModelBytes(const std::vector<Tensor>& tensors, float value = 0.5f) {
  std::vector<model::ParamSpec> params;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    model::ParamSpec p;
    p.name = t.name;
    p.shape = t.shape;
    p.num_elements = 1;
    for (int64_t d : t.shape) p.num_elements *= d;
    p.flat_offset = offset;
    offset += p.num_elements;
    params.push_back(p);
  }
  std::vector<float> values(offset);
  for (int64_t i = 0; i < offset; ++i) values[i] = value + static_cast<float>(i);
  absl::StatusOr<std::string> bytes = model::SerializeModelFile(params, values);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.value_or("");
}

// fc1.weight [4, 3], fc1.bias [3], fc2.weight [3, 2]: 21 parameters.
std::vector<Tensor> Mlp() { return {{"fc1.weight", {4, 3}}, {"fc1.bias", {3}}, {"fc2.weight", {3, 2}}}; }

ModelDeclaration Declaration(int rank, std::string bytes, int64_t train = 100, int64_t test = 40) {
  ModelDeclaration d;
  d.set_worker_rank(rank);
  d.set_model_file(std::move(bytes));
  d.set_train_samples(train);
  d.set_test_samples(test);
  return d;
}

// fc1.weight [4, 3], bn.running_mean [3], bn.running_var [3], fc2.weight [3, 2].
std::vector<Tensor> BnModel() {
  return {{"fc1.weight", {4, 3}}, {"bn.running_mean", {3}}, {"bn.running_var", {3}}, {"fc2.weight", {3, 2}}};
}

// A declaration of BnModel() by worker `rank` with `averaged` as its averaged tensors.
ModelDeclaration BnDeclaration(int rank, const std::vector<std::string>& averaged) {
  ModelDeclaration d = Declaration(rank, ModelBytes(BnModel()));
  for (const std::string& name : averaged) d.add_averaged_tensors(name);
  return d;
}

// `d` with a table `name` of `dim` floats per row.
ModelDeclaration WithTable(ModelDeclaration d, const std::string& name, int dim) {
  TableSpec* t = d.add_tables();
  t->set_name(name);
  t->set_dim(dim);
  return d;
}

// TensorSpec.averaged of each tensor of `map`, in model order.
std::vector<bool> AveragedFlags(const ShardMap& map) {
  std::vector<bool> flags;
  for (const TensorSpec& t : map.tensors()) flags.push_back(t.averaged());
  return flags;
}

class DeclaredModelTest : public ::testing::Test {
 protected:
  // A 2-server, 2-worker SYNC job of an external model, batch 10, 2 epochs, as SetUpJob leaves it:
  // no shard map, the pinned sizes (none unless `pin_train`), no steps. Snapshots go to saved_,
  // the declared model file to saved_model_.
  Scheduler::Options Opts(int64_t pin_train = 0, std::string model = "external") {
    JobSpec job;
    job.set_model(model);
    job.set_num_servers(2);
    job.set_num_workers(2);
    job.set_epochs(2);
    job.set_batch_size(10);
    job.set_max_chunk_bytes(16);
    job.mutable_data()->set_train_samples(pin_train);
    ApplyJobDefaults(&job);
    Scheduler::Options options;
    options.job = job;
    options.train_samples = pin_train;
    options.dead_after = absl::Seconds(3);
    options.clock = [this] { return now_; };
    options.persist = [this](int64_t version, const SchedulerState& state) {
      if (version > saved_version_) {
        saved_version_ = version;
        saved_ = state;
      }
      return absl::OkStatus();
    };
    options.save_declared_model = [this](absl::string_view bytes) -> absl::Status {
      if (!save_error_.ok()) return save_error_;
      saved_model_ = std::string(bytes);
      return absl::OkStatus();
    };
    return options;
  }

  static std::unique_ptr<Scheduler> Make(Scheduler::Options options) {
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(std::move(options));
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(s).value();
  }

  static void RegisterAll(Scheduler* s) {
    ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
    ASSERT_TRUE(s->Register(Reg(SERVER, "h:2")).ok());
    ASSERT_TRUE(s->Register(Reg(WORKER, "h:3")).ok());
    ASSERT_TRUE(s->Register(Reg(WORKER, "h:4")).ok());
  }

  // Expects that `s` has accepted no declaration.
  void ExpectNothingDeclared(Scheduler* s) {
    EXPECT_EQ(s->state(), WAITING_FOR_ROLES);
    EXPECT_EQ(s->View().shard_map().tensors_size(), 0);
    absl::StatusOr<Scheduler::DeclaredModel> model = s->InitialModel();
    EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(model.status().message(), HasSubstr("no model declared yet"));
    EXPECT_FALSE(saved_model_.has_value());
    EXPECT_FALSE(saved_.has_declared_model());
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  SchedulerState saved_;
  int64_t saved_version_ = 0;
  std::optional<std::string> saved_model_;
  absl::Status save_error_;
};

TEST_F(DeclaredModelTest, TheJobRunsOnlyOnceEveryRoleRegisteredAndAModelIsDeclared) {
  auto s = Make(Opts());
  RegisterAll(s.get());
  EXPECT_EQ(s->state(), WAITING_FOR_ROLES);
  EXPECT_EQ(s->View().state(), WAITING_FOR_ROLES);
  EXPECT_EQ(s->View().shard_map().chunks_size(), 0);
  std::optional<absl::StatusOr<ClusterView>> answer;
  s->WhenRunning([&](absl::StatusOr<ClusterView> view) { answer = std::move(view); });
  EXPECT_FALSE(answer.has_value());

  ASSERT_TRUE(s->DeclareModel(Declaration(0, ModelBytes(Mlp()))).ok());
  EXPECT_EQ(s->state(), RUNNING);
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE(answer->ok()) << answer->status();
  const ClusterView& view = **answer;
  EXPECT_EQ(view.state(), RUNNING);
  ASSERT_EQ(view.shard_map().tensors_size(), 3);
  EXPECT_EQ(view.shard_map().tensors(0).name(), "fc1.weight");
  EXPECT_THAT(view.shard_map().tensors(2).shape(), ::testing::ElementsAre(3, 2));
  EXPECT_EQ(view.shard_map().tensors(2).flat_offset(), 15);
  EXPECT_GT(view.shard_map().chunks_size(), 3);  // 16-byte chunks
  EXPECT_EQ(view.train_samples(), 100);
  EXPECT_EQ(view.test_samples(), 40);
  EXPECT_EQ(view.total_steps(), 10);  // 2 epochs of 100 samples in global batches of 20
  EXPECT_EQ(s->Status().total_steps(), 10);
}

TEST_F(DeclaredModelTest, ADeclarationBeforeTheLastRegistrationRunsTheJobAtThatRegistration) {
  auto s = Make(Opts());
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:1")).ok());
  ASSERT_TRUE(s->Register(Reg(SERVER, "h:2")).ok());
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:3")).ok());
  ASSERT_TRUE(s->DeclareModel(Declaration(0, ModelBytes(Mlp()))).ok());
  EXPECT_EQ(s->state(), WAITING_FOR_ROLES);
  ASSERT_TRUE(s->Register(Reg(WORKER, "h:4")).ok());
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_EQ(s->View().shard_map().tensors_size(), 3);
}

TEST_F(DeclaredModelTest, TheFirstDeclarationWinsAndLaterMatchingOnesAreOk) {
  auto s = Make(Opts());
  RegisterAll(s.get());
  const std::string first = ModelBytes(Mlp(), 0.5f);
  ASSERT_TRUE(s->DeclareModel(Declaration(1, first)).ok());
  // Other values, same names, shapes and sizes: OK; a retry too.
  ASSERT_TRUE(s->DeclareModel(Declaration(0, ModelBytes(Mlp(), -3.0f))).ok());
  ASSERT_TRUE(s->DeclareModel(Declaration(1, first)).ok());
  absl::StatusOr<Scheduler::DeclaredModel> model = s->InitialModel();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->worker_rank, 1);
  EXPECT_EQ(*model->model_file, first);
  EXPECT_EQ(saved_model_, first);
  EXPECT_EQ(saved_.declared_model().worker_rank(), 1);
  EXPECT_EQ(saved_.declared_model().model_file_bytes(), static_cast<int64_t>(first.size()));
  EXPECT_EQ(saved_.train_samples(), 100);
  EXPECT_EQ(saved_.total_steps(), 10);
}

TEST_F(DeclaredModelTest, ALaterDeclarationThatDiffersIsRefusedNamingTheDifference) {
  auto s = Make(Opts());
  RegisterAll(s.get());
  ASSERT_TRUE(s->DeclareModel(Declaration(0, ModelBytes(Mlp()))).ok());
  auto refused = [&](const std::vector<Tensor>& tensors, int64_t train, int64_t test) {
    absl::Status status = s->DeclareModel(Declaration(1, ModelBytes(tensors), train, test));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    return std::string(status.message());
  };
  EXPECT_EQ(refused({{"fc1.weight", {4, 3}}, {"fc1.bias", {3}}, {"fc2.weight", {3, 4}}}, 100, 40),
            "worker 1 declares tensor 2 'fc2.weight' with shape [3, 4]; the job's is [3, 2]");
  EXPECT_EQ(refused({{"fc1.weight", {4, 3}}, {"fc1.b", {3}}, {"fc2.weight", {3, 2}}}, 100, 40),
            "worker 1 declares tensor 1 as 'fc1.b'; the job's tensor 1 is 'fc1.bias'");
  EXPECT_EQ(refused({{"fc1.weight", {4, 3}}, {"fc1.bias", {3}}}, 100, 40),
            "worker 1 declares 2 tensors; the job's model has 3");
  EXPECT_EQ(refused(Mlp(), 98, 40), "worker 1 declares 98 training samples; the job has 100");
  EXPECT_EQ(refused(Mlp(), 100, 0), "worker 1 declares 0 test samples; the job has 40");
  // The job's model is as it was.
  EXPECT_EQ(s->InitialModel()->worker_rank, 0);
  EXPECT_THAT(s->View().shard_map().tensors(2).shape(), ::testing::ElementsAre(3, 2));
}

TEST_F(DeclaredModelTest, PinnedSizesRefuseOtherSizesAndFillInNothing) {
  auto s = Make(Opts(/*pin_train=*/100));
  RegisterAll(s.get());
  absl::Status status = s->DeclareModel(Declaration(0, ModelBytes(Mlp()), 60));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "worker 0 declares 60 training samples; the job pins 100 (data.train_samples)");
  ExpectNothingDeclared(s.get());
  // The test set is not pinned: the declaration gives it.
  ASSERT_TRUE(s->DeclareModel(Declaration(0, ModelBytes(Mlp()), 100, 7)).ok());
  EXPECT_EQ(s->View().test_samples(), 7);
}

TEST_F(DeclaredModelTest, RefusedDeclarationsChangeNothing) {
  auto s = Make(Opts());
  RegisterAll(s.get());
  auto code = [&](ModelDeclaration d) { return s->DeclareModel(d); };

  absl::Status garbage = code(Declaration(0, "not a model file at all"));
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.message(), HasSubstr("model declaration from worker 0"));
  std::string truncated = ModelBytes(Mlp());
  truncated.resize(truncated.size() - 9);
  EXPECT_EQ(code(Declaration(0, truncated)).code(), absl::StatusCode::kDataLoss);

  absl::Status empty = code(Declaration(0, ModelBytes({})));
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("the model has no tensors"));
  absl::Status zero = code(Declaration(0, ModelBytes({{"w", {4, 0}}})));
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.message(), HasSubstr("tensor 0 'w' with shape [4, 0] has no elements"));
  absl::Status scalar = code(Declaration(0, ModelBytes({{"t", {}}})));
  EXPECT_EQ(scalar.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(scalar.message(), HasSubstr("tensor 0 't' has no dimensions"));

  std::vector<model::ParamSpec> params(1);
  params[0].name = "b";
  params[0].shape = {3};
  params[0].num_elements = 3;
  const std::vector<float> nan_values = {1.0f, std::nanf(""), 2.0f};
  absl::Status nan = code(Declaration(0, *model::SerializeModelFile(params, nan_values)));
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nan.message(),
              HasSubstr("tensor 'b' element 1 is nan, expected finite values"));  // model/model_file.h refuses it

  absl::Status no_train = code(Declaration(0, ModelBytes(Mlp()), 0, 40));
  EXPECT_EQ(no_train.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_train.message(), HasSubstr("0 training samples, expected at least 1"));
  EXPECT_EQ(code(Declaration(0, ModelBytes(Mlp()), 100, -1)).code(), absl::StatusCode::kInvalidArgument);

  absl::Status stranger = code(Declaration(7, ModelBytes(Mlp())));
  EXPECT_EQ(stranger.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stranger.message(), HasSubstr("model declaration from worker 7: not registered"));

  save_error_ = absl::PermissionDeniedError("state folder: read-only");
  EXPECT_EQ(code(Declaration(0, ModelBytes(Mlp()))).code(), absl::StatusCode::kUnavailable);
  save_error_ = absl::OkStatus();

  ExpectNothingDeclared(s.get());
  // And the job still takes a good one.
  ASSERT_TRUE(code(Declaration(0, ModelBytes(Mlp()))).ok());
  EXPECT_EQ(s->state(), RUNNING);
}

TEST_F(DeclaredModelTest, BuiltInModelsTakeNoDeclaration) {
  Scheduler::Options options = test_util::TinyJobOptions(JobSpec(), 8, 100, 40, 10, [this] { return now_; });
  auto s = Make(options);
  RegisterAll(s.get());
  EXPECT_EQ(s->state(), RUNNING);
  absl::Status status = s->DeclareModel(Declaration(0, ModelBytes(Mlp())));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the job's model is 'mlp'"));
  EXPECT_EQ(s->InitialModel().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(DeclaredModelTest, TheStartupTimeoutSaysThatNoModelWasDeclared) {
  Scheduler::Options options = Opts();
  options.startup_timeout = absl::Seconds(10);
  auto s = Make(options);
  RegisterAll(s.get());
  for (Role role : {SERVER, WORKER}) {
    for (int rank = 0; rank < 2; ++rank) ASSERT_TRUE(s->Heartbeat(test_util::Hb(role, rank)).ok());
  }
  now_ += absl::Seconds(2);
  for (Role role : {SERVER, WORKER}) {
    for (int rank = 0; rank < 2; ++rank) ASSERT_TRUE(s->Heartbeat(test_util::Hb(role, rank)).ok());
  }
  s->CheckHealth();
  EXPECT_EQ(s->state(), WAITING_FOR_ROLES);
  now_ += absl::Seconds(9);
  // Heartbeats keep everyone alive; only the missing declaration ends the wait.
  for (Role role : {SERVER, WORKER}) {
    for (int rank = 0; rank < 2; ++rank) ASSERT_TRUE(s->Heartbeat(test_util::Hb(role, rank)).ok());
  }
  s->CheckHealth();
  EXPECT_EQ(s->state(), FAILED);
  EXPECT_THAT(s->failure().message(), HasSubstr("every role registered, but no worker declared the model"));
}

TEST_F(DeclaredModelTest, ARestartedSchedulerKeepsTheDeclaration) {
  const std::string first = ModelBytes(Mlp(), 0.25f);
  {
    auto s = Make(Opts());
    RegisterAll(s.get());
    ASSERT_TRUE(s->DeclareModel(Declaration(1, first)).ok());
  }
  ASSERT_TRUE(saved_model_.has_value());
  Scheduler::Options options = Opts();
  options.declared_model_file = *saved_model_;
  absl::StatusOr<std::unique_ptr<Scheduler>> restarted = Scheduler::Restore(options, saved_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  Scheduler& s = **restarted;
  EXPECT_EQ(s.state(), RUNNING);
  const ClusterView view = s.View();
  EXPECT_EQ(view.shard_map().tensors_size(), 3);
  EXPECT_EQ(view.train_samples(), 100);
  EXPECT_EQ(view.total_steps(), 10);
  absl::StatusOr<Scheduler::DeclaredModel> model = s.InitialModel();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->worker_rank, 1);
  EXPECT_EQ(*model->model_file, first);
  // Later declarations are still compared with it.
  EXPECT_TRUE(s.DeclareModel(Declaration(0, ModelBytes(Mlp(), 9.0f))).ok());
  EXPECT_EQ(s.DeclareModel(Declaration(0, ModelBytes(Mlp()), 99)).code(), absl::StatusCode::kInvalidArgument);
  // The state it writes still names the declaration.
  EXPECT_EQ(s.Snapshot().declared_model().worker_rank(), 1);
}

TEST_F(DeclaredModelTest, ARestartRefusesAMissingOrForeignModelFile) {
  {
    auto s = Make(Opts());
    RegisterAll(s.get());
    ASSERT_TRUE(s->DeclareModel(Declaration(0, ModelBytes(Mlp()))).ok());
  }
  Scheduler::Options options = Opts();  // no declared_model_file: lost
  absl::Status lost = Scheduler::Restore(options, saved_).status();
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(lost.message(), HasSubstr("the declared model file holds 0 bytes"));
  // Same size, other names.
  options.declared_model_file = ModelBytes({{"fc1.weigh0", {4, 3}}, {"fc1.bias", {3}}, {"fc2.weight", {3, 2}}});
  ASSERT_EQ(options.declared_model_file.size(), saved_model_->size());
  absl::Status foreign = Scheduler::Restore(options, saved_).status();
  EXPECT_EQ(foreign.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(foreign.message(), HasSubstr("tensor 0 as 'fc1.weigh0'"));
}

TEST_F(DeclaredModelTest, ARestartBeforeADeclarationWaitsForOne) {
  {
    auto s = Make(Opts());
    RegisterAll(s.get());
  }
  absl::StatusOr<std::unique_ptr<Scheduler>> restarted = Scheduler::Restore(Opts(), saved_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ((*restarted)->state(), WAITING_FOR_ROLES);
  ASSERT_TRUE((*restarted)->DeclareModel(Declaration(1, ModelBytes(Mlp()))).ok());
  EXPECT_EQ((*restarted)->state(), RUNNING);
}

TEST_F(DeclaredModelTest, AveragedTensorsAreFlaggedInTheShardMapAndLaterDeclarationsMayListThemInAnyOrder) {
  auto s = Make(Opts());
  RegisterAll(s.get());
  ASSERT_TRUE(s->DeclareModel(BnDeclaration(0, {"bn.running_var", "bn.running_mean"})).ok());
  EXPECT_EQ(s->state(), RUNNING);
  EXPECT_THAT(AveragedFlags(s->View().shard_map()), ::testing::ElementsAre(false, true, true, false));
  EXPECT_THAT(AveragedFlags(saved_.membership().shard_map()), ::testing::ElementsAre(false, true, true, false));
  EXPECT_TRUE(s->DeclareModel(BnDeclaration(1, {"bn.running_mean", "bn.running_var"})).ok());
  // A job without averaged tensors flags none.
  auto plain = Make(Opts());
  RegisterAll(plain.get());
  ASSERT_TRUE(plain->DeclareModel(BnDeclaration(0, {})).ok());
  EXPECT_THAT(AveragedFlags(plain->View().shard_map()), ::testing::ElementsAre(false, false, false, false));
}

TEST_F(DeclaredModelTest, AveragedTensorsMustBeDeclaredTensorsListedOnce) {
  auto s = Make(Opts());
  RegisterAll(s.get());
  absl::Status unknown = s->DeclareModel(BnDeclaration(0, {"bn.running_mean", "bn.running_mea"}));
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.message(),
            "model declaration from worker 0: averaged tensor 'bn.running_mea' is not a declared tensor");
  absl::Status twice = s->DeclareModel(BnDeclaration(0, {"bn.running_var", "bn.running_mean", "bn.running_var"}));
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(twice.message(),
            "model declaration from worker 0: averaged tensor 'bn.running_var' is listed twice (at 0 and 2)");
  ExpectNothingDeclared(s.get());
  ASSERT_TRUE(s->DeclareModel(BnDeclaration(0, {"bn.running_var"})).ok());
  EXPECT_THAT(AveragedFlags(s->View().shard_map()), ::testing::ElementsAre(false, false, true, false));
}

TEST_F(DeclaredModelTest, ALaterDeclarationWithOtherAveragedTensorsIsRefusedNamingTheFirstDifference) {
  auto s = Make(Opts());
  RegisterAll(s.get());
  ASSERT_TRUE(s->DeclareModel(BnDeclaration(0, {"bn.running_mean", "bn.running_var"})).ok());
  absl::Status more = s->DeclareModel(BnDeclaration(1, {"bn.running_mean", "bn.running_var", "fc2.weight"}));
  EXPECT_EQ(more.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(more.message(), "worker 1 declares tensor 'fc2.weight' as averaged; the job trains it");
  absl::Status fewer = s->DeclareModel(BnDeclaration(1, {"bn.running_mean"}));
  EXPECT_EQ(fewer.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fewer.message(), "worker 1 declares tensor 'bn.running_var' as trained; the job averages it");
  // Both differ: the first tensor in model order is named.
  absl::Status swapped = s->DeclareModel(BnDeclaration(1, {"fc1.weight", "bn.running_var"}));
  EXPECT_EQ(swapped.message(), "worker 1 declares tensor 'fc1.weight' as averaged; the job trains it");
  // The job's set is as it was.
  EXPECT_THAT(AveragedFlags(s->View().shard_map()), ::testing::ElementsAre(false, true, true, false));
  EXPECT_EQ(s->InitialModel()->worker_rank, 0);
}

TEST_F(DeclaredModelTest, ARestartedSchedulerKeepsTheAveragedTensors) {
  {
    auto s = Make(Opts());
    RegisterAll(s.get());
    ASSERT_TRUE(s->DeclareModel(BnDeclaration(1, {"bn.running_mean", "bn.running_var"})).ok());
  }
  Scheduler::Options options = Opts();
  options.declared_model_file = *saved_model_;
  absl::StatusOr<std::unique_ptr<Scheduler>> restarted = Scheduler::Restore(options, saved_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  Scheduler& s = **restarted;
  EXPECT_THAT(AveragedFlags(s.View().shard_map()), ::testing::ElementsAre(false, true, true, false));
  EXPECT_THAT(AveragedFlags(s.Snapshot().membership().shard_map()), ::testing::ElementsAre(false, true, true, false));
  // Later declarations are still compared with the set.
  EXPECT_TRUE(s.DeclareModel(BnDeclaration(0, {"bn.running_var", "bn.running_mean"})).ok());
  absl::Status none = s.DeclareModel(BnDeclaration(0, {}));
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.message(), "worker 0 declares tensor 'bn.running_mean' as trained; the job averages it");
}

}  // namespace
TEST_F(DeclaredModelTest, AJobWithoutTablesAdoptsTheFirstDeclarationsAndKeepsThemAcrossARestart) {
  {
    auto s = Make(Opts());
    RegisterAll(s.get());
    EXPECT_EQ(s->View().tables_size(), 0);
    ModelDeclaration bad = WithTable(Declaration(0, ModelBytes(Mlp())), "user", 0);
    absl::Status refused = s->DeclareModel(bad);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.message(), HasSubstr("model declaration from worker 0: tables[0].dim: got 0"));
    ExpectNothingDeclared(s.get());
    ASSERT_TRUE(s->DeclareModel(WithTable(WithTable(Declaration(0, ModelBytes(Mlp())), "user", 8), "item", 4)).ok());
    const ClusterView view = s->View();
    ASSERT_EQ(view.tables_size(), 2);
    EXPECT_EQ(view.tables(0).name(), "user");
    EXPECT_EQ(view.tables(1).dim(), 4);
    // Unset optimizers take the job's table_optimizer, with its defaults.
    EXPECT_EQ(view.tables(1).optimizer().type(), SparseOptimizerSpec::ADAGRAD);
    EXPECT_FLOAT_EQ(view.tables(1).optimizer().lr(), 0.05f);
    // Later declarations list the same tables (in any order) or none.
    EXPECT_TRUE(s->DeclareModel(WithTable(WithTable(Declaration(1, ModelBytes(Mlp())), "item", 4), "user", 8)).ok());
    EXPECT_TRUE(s->DeclareModel(Declaration(1, ModelBytes(Mlp()))).ok());
    absl::Status missing = s->DeclareModel(WithTable(Declaration(1, ModelBytes(Mlp())), "user", 8));
    EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(missing.message(), HasSubstr("worker 1 declares 1 of the job's 2 tables: table 'item' is missing"));
  }
  Scheduler::Options options = Opts();
  options.declared_model_file = *saved_model_;
  absl::StatusOr<std::unique_ptr<Scheduler>> restarted = Scheduler::Restore(options, saved_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  ASSERT_EQ((*restarted)->View().tables_size(), 2);
  EXPECT_EQ((*restarted)->View().tables(1).name(), "item");
  absl::Status wider =
      (*restarted)->DeclareModel(WithTable(WithTable(Declaration(0, ModelBytes(Mlp())), "user", 16), "item", 4));
  EXPECT_THAT(wider.message(),
              HasSubstr("worker 0 declares table 'user' with dim 16; the job's table 'user' has dim 8"));
}

// An external model's job may set a memory budget before it has tables; the first declaration's
// tables must fit it (each table's fixed bytes and one row), or the declaration is refused.
TEST_F(DeclaredModelTest, DeclaredTablesMustFitTheJobsMemoryBudget) {
  // user: dim 8, Adagrad: 1024 x (64 + 12) + 2^20 fixed, 64 + 42 a row; item: dim 4, 1024 x
  // (32 + 12) + 2^20 and 32 + 42.
  constexpr int64_t kLeast = 1024 * 76 + (1 << 20) + 106 + 1024 * 44 + (1 << 20) + 74;
  auto declare = [](Scheduler* s) {
    return s->DeclareModel(WithTable(WithTable(Declaration(0, ModelBytes(Mlp())), "user", 8), "item", 4));
  };
  Scheduler::Options small = Opts();
  small.job.set_table_memory_budget(kLeast - 1);
  auto s = Make(small);
  RegisterAll(s.get());
  const absl::Status refused = declare(s.get());
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              HasSubstr(absl::StrCat("model declaration from worker 0: table_memory_budget: got ", kLeast - 1,
                                     " bytes, expected at least ", kLeast, " bytes a server")));
  ExpectNothingDeclared(s.get());

  Scheduler::Options enough = Opts();
  enough.job.set_table_memory_budget(kLeast);
  auto t = Make(enough);
  RegisterAll(t.get());
  ASSERT_TRUE(declare(t.get()).ok());
  EXPECT_EQ(t->View().tables_size(), 2);
}

TEST_F(DeclaredModelTest, AJobsOwnTablesMustBeDeclaredAsTheyAre) {
  Scheduler::Options options = Opts();
  TableSpec* table = options.job.add_tables();
  table->set_name("user");
  table->set_dim(8);
  ApplyJobDefaults(&options.job);
  auto s = Make(options);
  RegisterAll(s.get());
  EXPECT_EQ(s->View().tables_size(), 1);  // the job's, before any declaration
  absl::Status foreign = s->DeclareModel(WithTable(Declaration(0, ModelBytes(Mlp())), "item", 8));
  EXPECT_EQ(foreign.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(foreign.message(),
              HasSubstr("worker 0 declares table 'item'; the job has no such table (its tables: user)"));
  ModelDeclaration sgd = WithTable(Declaration(0, ModelBytes(Mlp())), "user", 8);
  sgd.mutable_tables(0)->mutable_optimizer()->set_type(SparseOptimizerSpec::SGD);
  EXPECT_THAT(s->DeclareModel(sgd).message(),
              HasSubstr("worker 0 declares table 'user' with optimizer {type: SGD lr: 0.05"));
  ExpectNothingDeclared(s.get());
  // The job's table with its own settings left unset (or equal), and a model that lists none.
  ModelDeclaration same = WithTable(Declaration(0, ModelBytes(Mlp())), "user", 8);
  same.mutable_tables(0)->set_init_bound(1.0f / std::sqrt(8.0f));
  ASSERT_TRUE(s->DeclareModel(same).ok());
  EXPECT_TRUE(s->DeclareModel(Declaration(1, ModelBytes(Mlp()))).ok());
  EXPECT_EQ(s->Snapshot().declared_model().tables_size(), 0);  // nothing adopted: the job has its own
  ASSERT_EQ(s->View().tables_size(), 1);
  EXPECT_EQ(s->View().tables(0).dim(), 8);
}

}  // namespace pstrain::scheduler
