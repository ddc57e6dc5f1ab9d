// Writes the seed corpora of the fuzz targets: a few valid encodings of each input, made by the
// project's own encoders, so the fuzzer starts from inputs that get past the first checks.
//
//   build/fuzz/bin/fuzz_seeds fuzz/corpus
//
// Writes <dir>/<target>/seed-<name> files; the seeds are small (a few hundred bytes each) and
// checked in. Rerun when a format changes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "transport/tensor_wire.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/small_store.h"
#include "model/model_file.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_test_util.h"
#include "scheduler/state_file.h"
#include "server/checkpoint.h"
#include "server/embedding_table.h"
#include "serving/model_export.h"

namespace pstrain::fuzz {
namespace {

std::string out_dir;

[[noreturn]] void Die(const absl::Status& s) {
  std::fprintf(stderr, "fuzz_seeds: %s\n", s.ToString().c_str());
  std::abort();
}

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = absl::StrCat(out_dir, "/", target);
  mkdir(dir.c_str(), 0755);
  std::ofstream(absl::StrCat(dir, "/seed-", name), std::ios::binary) << bytes;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) std::abort();
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size());
}

template <typename T>
std::string Le(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A push of the small store's model (small_store.h) by `rank` at `step`: every chunk, float32,
// plus two rows of table 0.
std::string Push(int rank, int64_t step) {
  OutgoingPush push;
  push.header.set_worker_rank(rank);
  push.header.set_membership_epoch(4);
  push.header.set_step(step);
  push.header.set_num_samples(8);
  push.header.set_request_id(100 * rank + step + 1);
  static const std::vector<float> grad(25, 0.25f);
  for (auto [tensor, offset, length, at] : {std::tuple{0, 0, 12, 0}, {0, 12, 8, 12}, {1, 0, 5, 20}}) {
    TensorChunk* c = push.header.add_chunks();
    c->set_tensor_id(tensor);
    c->set_offset(offset);
    c->set_length(length);
    push.values.emplace_back(reinterpret_cast<const char*>(grad.data() + at), 4 * length);
  }
  SparseRows* rows = push.header.add_sparse();
  rows->set_table_id(0);
  rows->set_keys(Le<uint64_t>(3) + Le<uint64_t>(9));
  rows->set_rows(Bytes({0.5f, -0.5f, 1.0f, 2.0f}));
  grpc::ByteBuffer out;
  EncodePush(push, &out);
  return Flatten(out);
}

std::string PullRequestBytes(int rank, int64_t step) {
  PullRequest r;
  r.set_worker_rank(rank);
  r.set_membership_epoch(4);
  r.set_step(step);
  SparseRows* rows = r.add_sparse();
  rows->set_table_id(0);
  rows->set_keys(Le<uint64_t>(3));
  return r.SerializeAsString();
}

void WireSeeds() {
  Write("tensor_wire_fuzz", "push", std::string(1, '\xff') + Push(0, 0));
  Write("tensor_wire_fuzz", "push-split", std::string(1, '\x06') + Push(1, 3));
  PullResponse header;
  header.set_step(5);
  TensorChunk* c = header.add_chunks();
  c->set_tensor_id(1);
  c->set_length(5);
  BufferPool pool;
  PooledBuffer values = pool.Acquire(20);
  std::memset(values.data(), 0, 20);
  grpc::ByteBuffer pull;
  EncodePull(header, std::move(values), &pull);
  Write("tensor_wire_fuzz", "pull", std::string(1, '\x10') + Flatten(pull));
  Write("tensor_wire_fuzz", "pull-request", std::string(1, '\xff') + PullRequestBytes(0, 1));

  // chunk_codec_fuzz: encoding, length, cut, data.
  Write("chunk_codec_fuzz", "float32", std::string("\x00\x04\x05", 3) + Bytes({1, -2, 3.5f, 0}));
  Write("chunk_codec_fuzz", "float16",
        std::string("\x01\x04\x03", 3) + std::string("\x00\x3c\x00\xc0\x00\x00\x00\x7c", 8));
  Write("chunk_codec_fuzz", "bfloat16",
        std::string("\x02\x04\x01", 3) + std::string("\x80\x3f\x00\xc0\x00\x00\x80\x7f", 8));
  Write("chunk_codec_fuzz", "topk",
        std::string("\x03\x10\x06", 3) + Le<uint32_t>(2) + Le<uint32_t>(9) + Bytes({0.5f, -1}));
}

void IdxSeeds() {
  std::string images = std::string("\x00\x00\x08\x03", 4) +
                       std::string("\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02", 12) +
                       std::string("\x00\x10\x20\x30\x40\x50\x60\xff", 8);
  std::string labels = std::string("\x00\x00\x08\x01\x00\x00\x00\x02", 8) + std::string("\x03\x09", 2);
  const std::string split = Le<uint16_t>(static_cast<uint16_t>(images.size()));
  Write("idx_reader_fuzz", "pair", std::string(1, '\0') + split + images + labels);
  Write("idx_reader_fuzz", "pair-limit1", std::string(1, '\1') + split + images + labels);
}

void TextSeeds() {
  std::string criteo = "1";
  for (int i = 0; i < 13; ++i) criteo += i == 4 ? "\t" : absl::StrCat("\t", i * 7);
  for (int i = 0; i < 26; ++i) criteo += i == 2 ? "\t" : absl::StrCat("\t", absl::Hex(0x68fd1e64u + i * 977));
  Write("ctr_line_fuzz", "criteo", criteo + "\n" + criteo + "\n");
  Write("ctr_line_fuzz", "libsvm", "1 3:0.5 17:1 200:-2.5\n0 1:1 # comment\n# only a comment\n");
  Write("job_spec_fuzz", "mlp",
        "model: \"mlp\"\nnum_servers: 2\nnum_workers: 2\nmode: SYNC\nbatch_size: 64\nepochs: 2\n"
        "optimizer { type: ADAM lr: 0.001 schedule { type: COSINE } }\ncheckpoint_dir: \"/tmp/ckpt\"\n");
  Write(
      "job_spec_fuzz", "ctr",
      "model: \"ctr\"\nnum_servers: 1\nnum_workers: 2\nmode: ASYNC\ndata { format: \"libsvm\" bad_records: \"skip\" }\n"
      "tables { name: \"user\" dim: 8 optimizer { type: ADAGRAD lr: 0.05 } }\n");
  // The checked-in deployment jobs are valid jobs too.
  Write("job_spec_fuzz", "k8s", ReadFile("deploy/k8s/base/job.textproto"));
}

void FileSeeds() {
  // Checkpoint of the small store after one ASYNC push (weights, Adam state, one table).
  auto store = SmallStore(ASYNC);
  grpc::Slice slice(Push(0, 0));
  IncomingPush push;
  if (!DecodePush(grpc::ByteBuffer(&slice, 1), "seed", &push).ok()) std::abort();
  PushResponse answer;
  store->Push(server::DecodedPush::Of(push), &answer, [](absl::Status s) {
    if (!s.ok()) Die(s);
  });
  auto ckpt = store->Checkpoint();
  if (!ckpt.ok()) Die(ckpt.status());
  const std::string path = WriteScratch("seed.ckpt", "");
  if (!server::WriteCheckpoint(path, *ckpt).ok()) std::abort();
  Write("checkpoint_fuzz", "async-step1", std::string(1, '\0') + ReadFile(path));
  Write("checkpoint_fuzz", "async-step1-fixcrc", std::string(1, '\1') + ReadFile(path));
  if (!ckpt->tables.empty()) {
    Write("embedding_table_fuzz", "adagrad", std::string(1, '\0') + ckpt->tables[0]);
  }
  for (int dtype = 0; dtype < 3; ++dtype) {  // fp32, fp16, bf16 (embedding_table_fuzz.cc's bits 3-4)
    for (int type = 0; type < 4; ++type) {
      server::TableOptions options;
      options.name = "user";
      options.dim = 2;
      options.seed = 7;
      options.optimizer.type = static_cast<server::SparseOptimizerOptions::Type>(type);
      options.row_dtype = static_cast<TableSpec::RowDtype>(dtype);
      auto table = server::EmbeddingTable::Create(options);
      if (!table.ok()) std::abort();
      std::vector<float> rows(6);
      if (!(*table)->Pull({1, 5, 80}, absl::MakeSpan(rows)).ok()) std::abort();
      std::string bytes;
      (*table)->Serialize(&bytes);
      Write("embedding_table_fuzz",
            dtype == 0 ? absl::StrCat("type", type) : absl::StrCat("type", type, "-dtype", dtype),
            std::string(1, static_cast<char>(type << 1 | dtype << 3)) + bytes);
    }
  }

  // A whole table with eviction and a delta after it (table_delta_fuzz: flags, base length, base,
  // delta).
  {
    server::TableOptions options;
    options.name = "user";
    options.dim = 2;
    options.seed = 7;
    options.track_changes = true;
    options.keep_tombstones = true;
    options.eviction.set_ttl_updates(2);
    options.eviction.set_every_updates(1);
    auto table = server::EmbeddingTable::Create(options);
    if (!table.ok()) std::abort();
    auto update = [&](std::vector<uint64_t> keys, int64_t step) {
      if (!(*table)->Apply(keys, std::vector<float>(keys.size() * 2, 0.5f), 0.1f, step).ok()) std::abort();
      (*table)->AfterUpdate(step);
    };
    update({1, 5, 80}, 0);
    std::string base;
    (*table)->Serialize(&base);
    (*table)->ForgetChanges();
    (*table)->DropTombstones();
    update({5, 9}, 1);
    update({9}, 2);  // key 1 and 80 leave: tombstones
    std::string delta;
    (*table)->SerializeDelta(&delta);
    if (base.size() > 0xffff) std::abort();
    const std::string length = {static_cast<char>(base.size() & 0xff), static_cast<char>(base.size() >> 8)};
    Write("table_delta_fuzz", "ttl", std::string(1, '\0') + length + base + delta);
    Write("table_delta_fuzz", "ttl-fixcrc", std::string(1, '\1') + length + base + delta);
  }

  std::vector<model::ParamSpec> params(2);
  params[0].name = "fc1.weight";
  params[0].shape = {2, 3};
  params[0].num_elements = 6;
  params[1].name = "fc1.bias";
  params[1].shape = {3};
  params[1].num_elements = 3;
  params[1].flat_offset = 6;
  auto model = model::SerializeModelFile(params, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  if (!model.ok()) std::abort();
  Write("model_file_fuzz", "mlp", std::string(1, '\0') + *model);
  Write("model_file_fuzz", "mlp-fixcrc", std::string(1, '\1') + *model);

  // A model export's rows file: three rows of dim 3 in fp32, and in fp16 (odd dim: a padding code).
  const std::vector<float> values = {0.5f, -1, 2, 0.25f, 0, -0.75f, 1, 1, 1};
  const std::string fp32(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  const std::string rows32 = serving::EncodeRowsFile(3, TableSpec::FP32, {3, 10, 77}, fp32);
  Write("export_rows_fuzz", "fp32", std::string(1, '\0') + rows32);
  Write("export_rows_fuzz", "fp32-fixcrc", std::string(1, '\1') + rows32);
  const std::string fp16(3 * 8, '\x3c');  // codes 0x3c3c, and the padding code likewise
  const std::string rows16 = serving::EncodeRowsFile(3, TableSpec::FP16, {3, 10, 77}, fp16);
  Write("export_rows_fuzz", "fp16-fixcrc", std::string(1, '\1') + rows16);
}

// The scheduler of scheduler_state_fuzz (same job), after every role registered and a worker reported.
std::string StateSeed() {
  JobSpec job;
  job.set_num_workers(2);
  job.set_num_servers(2);
  job.set_mode(SYNC);
  const absl::Time now = absl::FromUnixSeconds(1000);
  auto s =
      scheduler::Scheduler::Create(scheduler::test_util::TinyJobOptions(job, 64, 1000, 100, 40, [now] { return now; }));
  if (!s.ok()) std::abort();
  (void)(*s)->Register(scheduler::test_util::Reg(SERVER, "127.0.0.1:1"));
  (void)(*s)->Register(scheduler::test_util::Reg(SERVER, "127.0.0.1:2"));
  (void)(*s)->Register(scheduler::test_util::Reg(WORKER, ""));
  (void)(*s)->Register(scheduler::test_util::Reg(WORKER, ""));
  ProgressReport r;
  r.set_worker_rank(0);
  r.set_step(3);
  r.set_report_seq(1);
  (void)(*s)->ReportProgress(r);
  return scheduler::EncodeSchedulerState((*s)->Snapshot());
}

void RequestSeeds() {
  std::string ps(1, '\0');  // SYNC
  AppendFrame(0, Push(0, 0), &ps);
  AppendFrame(1, Push(1, 0), &ps);
  AppendFrame(2, PullRequestBytes(0, 1), &ps);
  FinishEpochRequest finish;
  finish.set_worker_rank(0);
  AppendFrame(3, finish.SerializeAsString(), &ps);
  Write("ps_request_fuzz", "sync", ps);
  ps[0] = 1;  // ASYNC
  Write("ps_request_fuzz", "async", ps);

  std::string sched(1, '\0');
  AppendFrame(0, scheduler::test_util::Reg(SERVER, "127.0.0.1:1").SerializeAsString(), &sched);
  AppendFrame(0, scheduler::test_util::Reg(SERVER, "127.0.0.1:2").SerializeAsString(), &sched);
  AppendFrame(0, scheduler::test_util::Reg(WORKER, "").SerializeAsString(), &sched);
  AppendFrame(0, scheduler::test_util::Reg(WORKER, "").SerializeAsString(), &sched);
  AppendFrame(1, scheduler::test_util::Hb(WORKER, 0).SerializeAsString(), &sched);
  BarrierRequest barrier;
  barrier.set_name("start");
  barrier.set_role(WORKER);
  AppendFrame(2, barrier.SerializeAsString(), &sched);
  LeaseRequest lease;
  lease.set_worker_rank(1);
  lease.set_request_seq(1);
  AppendFrame(3, lease.SerializeAsString(), &sched);
  ProgressReport progress;
  progress.set_worker_rank(0);
  progress.set_step(4);
  progress.set_report_seq(1);
  AppendFrame(4, progress.SerializeAsString(), &sched);
  CheckpointReport ckpts;
  ckpts.set_server_rank(1);
  ckpts.add_steps(2);
  ckpts.add_steps(4);
  AppendFrame(7, ckpts.SerializeAsString(), &sched);
  SlowStepReport slow;
  slow.set_server_rank(0);
  slow.set_step(3);
  slow.set_waited_ms(900);
  slow.add_waiting_for(1);
  AppendFrame(8, slow.SerializeAsString(), &sched);
  AppendFrame(11, "", &sched);
  AppendFrame(12, "\x05", &sched);
  LeaveRequest leave;
  leave.set_rank(1);
  AppendFrame(6, leave.SerializeAsString(), &sched);
  Write("scheduler_request_fuzz", "builtin", sched);
  sched[0] = 2;  // ASYNC
  Write("scheduler_request_fuzz", "builtin-async", sched);

  std::string external(1, '\1');
  for (Role role : {SERVER, SERVER, WORKER, WORKER}) {
    AppendFrame(0, scheduler::test_util::Reg(role, role == SERVER ? "127.0.0.1:3" : "").SerializeAsString(), &external);
  }
  std::vector<model::ParamSpec> params(1);
  params[0].name = "w";
  params[0].shape = {2, 2};
  params[0].num_elements = 4;
  ModelDeclaration declaration;
  declaration.set_worker_rank(0);
  declaration.set_model_file(*model::SerializeModelFile(params, std::vector<float>{1, 2, 3, 4}));
  declaration.set_train_samples(100);
  declaration.set_test_samples(40);
  AppendFrame(10, declaration.SerializeAsString(), &external);
  FinalModel final_model;
  final_model.set_worker_rank(0);
  final_model.set_model_file(declaration.model_file());
  AppendFrame(9, final_model.SerializeAsString(), &external);
  AppendFrame(11, "", &external);
  Write("scheduler_request_fuzz", "external", external);
}

}  // namespace
}  // namespace pstrain::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR (run from the repository root)\n");
    return 2;
  }
  pstrain::fuzz::out_dir = argv[1];
  pstrain::fuzz::WireSeeds();
  pstrain::fuzz::IdxSeeds();
  pstrain::fuzz::TextSeeds();
  pstrain::fuzz::FileSeeds();
  pstrain::fuzz::Write("scheduler_state_fuzz", "registered", std::string(1, '\0') + pstrain::fuzz::StateSeed());
  pstrain::fuzz::RequestSeeds();
  return 0;
}
