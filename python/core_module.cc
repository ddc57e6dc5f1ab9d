// pstrain._core: the worker library (worker/job_member.h, worker/training_session.h) as a Python
// extension. It adds no protocol of its own: each method is one call of the C++ API, with the GIL
// released while it may block, and tensors cross as NumPy views of the session's own buffers (no
// copies). An absl::Status error becomes a pstrain.Error (or a subclass by its code) whose message
// is the status message. Embedding tables are in table_bindings.cc; the CTR reader and the score
// histogram in ctr_bindings.cc; the serving client and model exports in serving_bindings.cc.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "common/job_spec.h"
#include "transport/transport_security.h"
#include "data/score_histogram.h"
#include "python/ctr_bindings.h"
#include "python/serving_bindings.h"
#include "python/status_errors.h"
#include "python/table_bindings.h"
#include "worker/job_member.h"
#include "worker/training_session.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

using worker::JobMember;
using worker::TrainingSession;

// The job's fields a Python training loop needs, as a dict.
py::dict JobDict(const JobSpec& job) {
  py::dict d;
  d["mode"] = Mode_Name(job.mode());
  d["model"] = job.model();
  d["batch_size"] = job.batch_size();
  d["epochs"] = job.epochs();
  d["seed"] = job.seed();
  d["num_servers"] = job.num_servers();
  d["num_workers"] = job.num_workers();
  d["overlap"] = OverlapOn(job);
  d["compression"] = job.compression();
  d["eval_last_epoch_only"] = job.eval_last_epoch_only();
  d["optimizer"] = OptimizerSpec::Type_Name(job.optimizer().type());
  d["lr"] = job.optimizer().lr();
  d["train_samples"] = job.data().train_samples();
  d["test_samples"] = job.data().test_samples();
  d["final_model_path"] = job.final_model_path();
  // The data as the job names it: a script that reads the job's files (examples/pytorch/ctr.py)
  // reads what the built-in models would.
  d["data_dir"] = job.data().data_dir();
  d["data_stream"] = job.data().stream_dir();
  d["data_format"] = job.data().format();
  d["bad_records"] = job.data().bad_records();
  d["train_limit"] = job.data().train_limit();
  d["test_limit"] = job.data().test_limit();
  d["hidden_sizes"] = std::vector<int>(job.hidden_sizes().begin(), job.hidden_sizes().end());
  d["embedding_dim"] = job.embedding_dim();
  py::list tables;
  for (const TableSpec& t : job.tables()) tables.append(TableDict(t));
  d["tables"] = tables;
  return d;
}

py::dict ViewDict(const ClusterView& view) {
  py::dict d;
  d["membership_epoch"] = view.membership_epoch();
  d["train_samples"] = view.train_samples();
  d["test_samples"] = view.test_samples();
  d["total_steps"] = view.total_steps();
  d["global_batch"] = view.global_batch();
  std::vector<int> workers;
  for (const WorkerInfo& w : view.workers()) workers.push_back(w.rank());
  d["workers"] = workers;
  d["num_servers"] = view.servers_size();
  return d;
}

// Names and shapes (Python) as the ParamSpecs of a flat layout, tensors back to back.
std::vector<model::ParamSpec> ParamsOf(const std::vector<std::string>& names,
                                       const std::vector<std::vector<int64_t>>& shapes) {
  if (names.size() != shapes.size()) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("parameters: ", names.size(), " names but ", shapes.size(), " shapes")));
  }
  std::vector<model::ParamSpec> params;
  int64_t offset = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    model::ParamSpec p;
    p.name = names[i];
    p.shape = shapes[i];
    p.num_elements = 1;
    for (int64_t d : p.shape) {
      if (d < 0) {
        throw StatusError(
            absl::InvalidArgumentError(absl::StrCat("parameter '", p.name, "': dimension ", d, ", expected >= 0")));
      }
      p.num_elements *= d;
    }
    p.flat_offset = offset;
    offset += p.num_elements;
    params.push_back(std::move(p));
  }
  return params;
}

// A float32 array that is C-contiguous, or a ValueError naming `what`.
const float* ContiguousFloats(const py::array& array, const std::string& what, int64_t expected) {
  if (!array.dtype().is(py::dtype::of<float>())) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(what, ": dtype ", std::string(py::str(array.dtype())), ", expected float32")));
  }
  if (!(array.flags() & py::array::c_style)) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(what, ": not C-contiguous")));
  }
  if (array.size() != expected) {
    throw StatusError(
        absl::InvalidArgumentError(absl::StrCat(what, ": ", array.size(), " floats, expected ", expected)));
  }
  return static_cast<const float*>(array.data());
}

// What Session.next() returns.
struct PyWork {
  std::string kind;  // "train", "evaluate" or "done"
  int epoch = 0;
  int64_t step = 0;
  std::vector<int64_t> samples;
  int64_t begin = 0;
  int64_t end = 0;
  bool left = false;
};

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A step's predictions for the session's training scores (end_step's arguments), checked so that
// a bad one counts nothing: INVALID_ARGUMENT for sizes that differ, or files whose samples do not
// add up to the predictions or that name no file of the session's view of the stream.
void TrainScores(const TrainingSession& session, const std::optional<FloatArray>& predictions,
                 const std::optional<FloatArray>& labels, const std::vector<std::pair<int64_t, int64_t>>& files,
                 model::BatchStats* stats) {
  if (predictions.has_value() != labels.has_value()) {
    throw StatusError(
        absl::InvalidArgumentError("end_step: predictions without labels or labels without "
                                   "predictions; expected both or neither"));
  }
  if (!predictions.has_value()) {
    if (!files.empty()) throw StatusError(absl::InvalidArgumentError("end_step: files without predictions"));
    return;
  }
  const py::ssize_t n = predictions->size();
  if (labels->size() != n) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("end_step: ", n, " predictions and ", labels->size(), " labels, expected one each")));
  }
  int64_t in_files = 0;
  const int64_t stream_files = session.view().stream().files_size();
  for (const auto& [file, samples] : files) {
    if (file < 0 || file >= stream_files || samples < 0) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat("end_step: files entry (", file, ", ", samples,
                                                                "); expected a file of the stream's ", stream_files,
                                                                " and samples >= 0")));
    }
    in_files += samples;
  }
  if (!files.empty() && in_files != n) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("end_step: files hold ", in_files, " samples, the predictions ", n, "; expected the same")));
  }
  stats->want_predictions = true;
  stats->predictions.assign(predictions->data(), predictions->data() + n);
  stats->labels.resize(n);
  for (py::ssize_t i = 0; i < n; ++i) stats->labels[i] = labels->data()[i] > 0.5f ? 1 : 0;
  stats->prediction_files = files;
}

const char* KindName(TrainingSession::Work::Kind kind) {
  switch (kind) {
    case TrainingSession::Work::kTrain:
      return "train";
    case TrainingSession::Work::kEvaluate:
      return "evaluate";
    case TrainingSession::Work::kDone:
      return "done";
  }
  return "done";
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  // The worker library logs through glog. Started here, as a binary's main() would, so its lines go
  // to stderr as before but without glog's "Logging before InitGoogleLogging()" warning; a host
  // program that set glog up already keeps its own settings.
  if (!google::IsGoogleLoggingInitialized()) {
    FLAGS_logtostderr = true;
    google::InitGoogleLogging("pstrain");
  }
  m.doc() = "pstrain's worker library (C++), for the pstrain package. Use pstrain or pstrain.torch.";
  RegisterStatusErrors(m);

  BindCtrData(m);
  BindServing(m);
  py::class_<TrainingSession> session(m, "Session",
                                      "One worker's training session: next() says what to do, the loop does it "
                                      "and reports (end_step, report_evaluation).");
  BindTables(m, session);
  session
      .def_property_readonly(
          "weights",
          [](py::object self) {
            auto& s = self.cast<TrainingSession&>();
            return py::array_t<float>({static_cast<py::ssize_t>(s.weights().size())}, {sizeof(float)},
                                      s.weights().data(), self);
          },
          "The model's weights, flat (a NumPy view of the session's buffer, never copied).")
      .def_property_readonly(
          "gradient",
          [](py::object self) {
            auto& s = self.cast<TrainingSession&>();
            return py::array_t<float>({static_cast<py::ssize_t>(s.gradient().size())}, {sizeof(float)},
                                      s.gradient().data(), self);
          },
          "The gradient buffer the loop fills, flat (a NumPy view).")
      .def_property_readonly("weights_version", &TrainingSession::weights_version)
      .def_property_readonly("rank", &TrainingSession::rank)
      .def_property_readonly("global_step", &TrainingSession::global_step)
      .def_property_readonly("view", [](const TrainingSession& s) { return ViewDict(s.view()); })
      .def(
          "next",
          [](TrainingSession& s) {
            TrainingSession::Work work;
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = s.Next(&work);
            }
            ThrowIfError(status);
            PyWork w;
            w.kind = KindName(work.kind);
            w.epoch = work.epoch;
            w.step = work.step;
            w.samples.assign(work.samples.begin(), work.samples.end());
            w.begin = work.begin;
            w.end = work.end;
            w.left = work.left;
            return w;
          },
          "Blocks until there is something to do; a Work.")
      .def(
          "begin_step",
          [](TrainingSession& s) {
            absl::StatusOr<model::GradientSink*> sink;
            {
              py::gil_scoped_release release;
              sink = s.BeginStep();
            }
            ThrowIfError(sink.status());
            return *sink != nullptr;
          },
          "Starts pushing the step; True when gradients are to be reported layer by layer "
          "(gradient_ready) while backward runs.")
      .def(
          "gradient_ready",
          [](TrainingSession& s, int first, int end) {
            // Only valid after begin_step returned True: the sink is the session's pusher.
            py::gil_scoped_release release;
            s.GradientReady(first, end);
          },
          py::arg("first"), py::arg("end"))
      .def(
          "end_step",
          [](TrainingSession& s, double loss_sum, const std::optional<FloatArray>& predictions,
             const std::optional<FloatArray>& labels, const std::vector<std::pair<int64_t, int64_t>>& files) {
            model::BatchStats stats;
            stats.loss_sum = loss_sum;
            TrainScores(s, predictions, labels, files, &stats);
            absl::StatusOr<TrainingSession::StepResult> result;
            {
              py::gil_scoped_release release;
              result = s.EndStep(stats);
            }
            ThrowIfError(result.status());
            return *result == TrainingSession::StepResult::kApplied;
          },
          py::arg("loss_sum"), py::arg("predictions") = py::none(), py::arg("labels") = py::none(),
          py::arg("files") = std::vector<std::pair<int64_t, int64_t>>(),
          "Pushes the gradient and installs the new weights; False when the step must be "
          "computed again (next() says what). predictions and labels: each sample's predicted probability "
          "of the positive class, from the forward pass of this gradient (before its update), and its label "
          "(> 0.5: positive), for the job's training AUC and, on a data stream, progressive validation; files: "
          "on a stream, the samples' files in order as StreamReader.read gives them, [(file, samples)].")
      .def("abandon_step",
           [](TrainingSession& s) {
             py::gil_scoped_release release;
             s.AbandonStep();
           })
      .def(
          "report_evaluation",
          [](TrainingSession& s, double loss_sum, int64_t correct, int64_t samples,
             const data::ScoreHistogram* scores) {
            model::BatchStats stats{loss_sum, correct, samples};
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = s.ReportEvaluation(stats, scores);
            }
            ThrowIfError(status);
          },
          py::arg("loss_sum"), py::arg("correct"), py::arg("samples"), py::arg("scores") = py::none(),
          "The results of the evaluation work; scores: a ScoreHistogram of the samples' predictions (one "
          "each), for the job's test AUC.");

  py::class_<PyWork>(m, "Work", "What to do next: kind 'train' (samples), 'evaluate' ([begin, end)) or 'done'.")
      .def_readonly("kind", &PyWork::kind)
      .def_readonly("epoch", &PyWork::epoch)
      .def_readonly("step", &PyWork::step)
      // One int64 NumPy array (a single copy), not a list of Python ints: it is made every step.
      .def_property_readonly("samples",
                             [](const PyWork& w) {
                               return py::array_t<int64_t>(static_cast<py::ssize_t>(w.samples.size()),
                                                           w.samples.data());
                             })
      .def_readonly("begin", &PyWork::begin)
      .def_readonly("end", &PyWork::end)
      .def_readonly("left", &PyWork::left)
      .def("__repr__", [](const PyWork& w) {
        return absl::StrCat("Work(", w.kind, ", epoch=", w.epoch, ", step=", w.step, ", samples=", w.samples.size(),
                            ", range=[", w.begin, ", ", w.end, "))");
      });

  py::class_<JobMember>(m, "Member", "This process's membership of a job, as a worker.")
      .def_static(
          "join",
          [](const std::string& scheduler, double rpc_timeout_s, double startup_timeout_s, int tcp_connections,
             const std::string& health_host, int health_port, const std::string& tls_cert, const std::string& tls_key,
             const std::string& tls_ca, const std::string& tls_server_name, const std::string& job_token_file,
             bool insecure, const std::string& metrics_host, int metrics_port,
             const std::string& metrics_advertise_host) {
            TransportSecurityOptions security;
            security.cert_file = tls_cert;
            security.key_file = tls_key;
            security.ca_file = tls_ca;
            if (!tls_server_name.empty()) security.server_name = tls_server_name;
            security.token_file = job_token_file;
            security.insecure = insecure;
            security.role = CertRole::kWorker;  // This process joins as a worker.
            absl::StatusOr<std::shared_ptr<const TransportSecurity>> secured = TransportSecurity::Create(security);
            ThrowIfError(secured.status());
            worker::MemberOptions options;
            options.security = *secured;
            options.scheduler_address = scheduler;
            options.health_host = health_host;
            options.health_port = health_port;
            options.rpc_timeout = absl::Seconds(rpc_timeout_s);
            options.startup_timeout = absl::Seconds(startup_timeout_s);
            options.tcp_connections = tcp_connections;
            options.metrics_host = metrics_host;
            options.metrics_port = metrics_port;
            options.metrics_advertise_host = metrics_advertise_host;
            absl::StatusOr<std::unique_ptr<JobMember>> member;
            {
              py::gil_scoped_release release;
              member = JobMember::Join(options);
            }
            ThrowIfError(member.status());
            return std::move(member).value();
          },
          py::arg("scheduler"), py::arg("rpc_timeout_s") = 60.0, py::arg("startup_timeout_s") = 120.0,
          py::arg("tcp_connections") = 2, py::arg("health_host") = "0.0.0.0", py::arg("health_port") = 0,
          py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("tls_ca") = "", py::arg("tls_server_name") = "",
          py::arg("job_token_file") = "", py::arg("insecure") = false, py::arg("metrics_host") = "0.0.0.0",
          py::arg("metrics_port") = 0, py::arg("metrics_advertise_host") = "")
      .def_property_readonly("rank", &JobMember::rank)
      .def_property_readonly("finished", &JobMember::finished)
      .def_property_readonly("job", [](const JobMember& m) { return JobDict(m.job()); })
      .def(
          "declare_model",
          [](JobMember& m, const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
             const py::array& values, int64_t train_samples, int64_t test_samples,
             const std::vector<std::string>& averaged, const py::list& tables) {
            std::vector<model::ParamSpec> params = ParamsOf(names, shapes);
            const float* data = ContiguousFloats(values, "initial values", model::TotalElements(params));
            const std::vector<TableSpec> specs = TableSpecsOf(tables);
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = m.DeclareModel(params, absl::MakeConstSpan(data, values.size()), train_samples, test_samples,
                                      averaged, specs);
            }
            ThrowIfError(status);
          },
          py::arg("names"), py::arg("shapes"), py::arg("values"), py::arg("train_samples"), py::arg("test_samples"),
          py::arg("averaged") = std::vector<std::string>(), py::arg("tables") = py::list(),
          "Declares the model (external jobs): names, shapes, float32 initial values (C-contiguous), the "
          "data set's sizes, the names of tensors the servers average instead of training, and the embedding "
          "tables the model looks rows up in (dicts: name, dim, optionally init_bound and optimizer). The job's "
          "tables must match them; a job without tables adopts the first declaration's.")
      .def("start",
           [](JobMember& m) {
             absl::StatusOr<ClusterView> view;
             {
               py::gil_scoped_release release;
               view = m.Start();
             }
             ThrowIfError(view.status());
             return ViewDict(*view);
           })
      .def(
          "new_session",
          [](JobMember& m, const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes) {
            absl::StatusOr<std::unique_ptr<TrainingSession>> session = m.NewSession(ParamsOf(names, shapes));
            ThrowIfError(session.status());
            return std::move(session).value();
          },
          py::arg("names"), py::arg("shapes"), py::keep_alive<0, 1>())
      .def("request_leave", &JobMember::RequestLeave)
      .def_property_readonly("leave_requested", &JobMember::leave_requested)
      .def(
          "finish",
          [](JobMember& m, py::object error) {
            absl::Status status = error.is_none() ? absl::OkStatus() : StatusOfException(error);
            absl::Status final_status;
            {
              py::gil_scoped_release release;
              final_status = m.Finish(status);
            }
            return final_status.ok() ? std::string() : std::string(final_status.ToString());
          },
          py::arg("error") = py::none(),
          "Ends this worker's part: a failure (an exception, or None for success) is reported to the "
          "scheduler. Returns '' or the final error's text.");
}

}  // namespace pstrain::python
