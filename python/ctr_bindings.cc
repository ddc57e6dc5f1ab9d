#include "python/ctr_bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/ctr_batch.h"
#include "data/ctr_files.h"
#include "data/ctr_source.h"
#include "data/line_reader.h"
#include "data/score_histogram.h"
#include "data/text_records.h"
#include "python/status_errors.h"
#include "worker/stream_reader.h"
#include "worker/training_session.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

// `values` as a NumPy array of `shape` that owns them: the vector moves into the array's base,
// nothing is copied.
template <typename T>
py::array_t<T> Owned(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  owned->reserve(1);  // an empty vector has no address; the array needs one
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(std::move(shape), owned->data(), base);
}

// `batch`'s samples as the dict CtrReader.read and StreamReader.read return (see CtrReader.read's
// doc); the arrays take over the batch's vectors.
py::dict BatchDict(data::CtrBatch& batch) {
  const py::ssize_t n = batch.size;
  py::dict d;
  d["labels"] = Owned(std::move(batch.labels), {n});
  d["dense"] = Owned(std::move(batch.dense), {n, batch.num_dense});
  py::list keys, offsets, weights;
  for (int f = 0; f < batch.num_fields(); ++f) {
    const py::ssize_t k = static_cast<py::ssize_t>(batch.keys[f].size());
    keys.append(Owned(std::move(batch.keys[f]), {k}));
    offsets.append(Owned(std::move(batch.offsets[f]), {n + 1}));
    if (batch.weights[f].empty()) {
      weights.append(py::none());
    } else {
      weights.append(Owned(std::move(batch.weights[f]), {k}));
    }
  }
  d["keys"] = keys;
  d["offsets"] = offsets;
  d["weights"] = weights;
  return d;
}

// The format and bad-record policy of a reader, from their Python names.
data::CtrSource::Options SourceOptions(const std::string& format, const std::string& bad_records) {
  absl::StatusOr<data::DataFormat> parsed = data::ParseDataFormat(format);
  ThrowIfError(parsed.status());
  absl::StatusOr<data::BadRecords> bad = data::ParseBadRecords(bad_records);
  ThrowIfError(bad.status());
  data::CtrSource::Options options;
  options.format = *parsed;
  options.bad_records = *bad;
  return options;
}

// One reader of one file, used by one Python thread at a time (the GIL is released while it
// reads, so the mutex keeps two threads from sharing the source).
class PyCtrReader {
 public:
  PyCtrReader(const std::string& path, const std::string& format, const std::string& bad_records) {
    absl::StatusOr<std::unique_ptr<data::CtrSource>> source =
        data::CtrSource::Open(path, SourceOptions(format, bad_records));
    ThrowIfError(source.status());
    source_ = std::move(source).value();
  }

  // The records [first, first + count) as a dict of NumPy arrays (see the binding's doc).
  py::dict Read(int64_t first, int64_t count) {
    data::CtrBatch batch;
    absl::Status status;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      status = source_->ReadBatch(first, count, &batch);
    }
    ThrowIfError(status);
    return BatchDict(batch);
  }

  int64_t skipped() const { return source_->skipped(); }
  const std::string& path() const { return source_->path(); }

 private:
  std::mutex mu_;
  std::unique_ptr<data::CtrSource> source_;
};

// A reader of a data stream's record positions (worker/stream_reader.h), with the files a
// session's view lists; one Python thread at a time, as PyCtrReader. Read looks at the session's
// view with the GIL released, so it must run on the thread that drives the session: the view
// changes only inside the session's next().
class PyStreamReader {
 public:
  PyStreamReader(const std::string& dir, const std::string& format, const std::string& bad_records)
      : reader_(dir, SourceOptions(format, bad_records)) {}

  py::dict Read(const worker::TrainingSession& session, int64_t first, int64_t count) {
    data::CtrBatch batch;
    absl::Status status;
    std::vector<std::pair<int64_t, int64_t>> files;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      status = reader_.Read(session.view().stream(), first, count, &batch);
      if (status.ok()) files = reader_.last_files();
    }
    ThrowIfError(status);
    py::dict d = BatchDict(batch);
    d["files"] = files;
    return d;
  }

  int64_t skipped() {
    std::lock_guard<std::mutex> lock(mu_);
    return reader_.skipped();
  }

 private:
  std::mutex mu_;
  worker::StreamReader reader_;
};

void AddScores(data::ScoreHistogram& h, const py::array_t<double, py::array::c_style | py::array::forcecast>& p,
               const py::array_t<double, py::array::c_style | py::array::forcecast>& labels) {
  if (p.size() != labels.size()) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("scores: ", p.size(), " probabilities and ", labels.size(), " labels, expected one each")));
  }
  const double* pd = p.data();
  const double* ld = labels.data();
  for (py::ssize_t i = 0; i < p.size(); ++i) {
    if (std::isnan(pd[i])) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat("scores: probability ", i, " is NaN")));
    }
  }
  // Checked first, so that a bad array counts nothing.
  for (py::ssize_t i = 0; i < p.size(); ++i) ThrowIfError(h.Add(pd[i], ld[i] > 0.5));
}

}  // namespace

void BindCtrData(py::module_& m) {
  py::class_<PyCtrReader>(m, "CtrReader",
                          "Record ranges of one Criteo or libsvm file (plain or gzip), read as the C++ worker "
                          "reads them (data/ctr_source.h). Reading forward is streaming; a range before the last "
                          "one reopens the file.")
      .def(py::init<const std::string&, const std::string&, const std::string&>(), py::arg("path"),
           py::arg("format") = "criteo", py::arg("bad_records") = "fail")
      .def("read", &PyCtrReader::Read, py::arg("first"), py::arg("count"),
           "Records [first, first + count), clipped to the file, as a dict of arrays (n samples): labels "
           "float32 [n] in {0, 1}; dense float32 [n, num_dense] (Criteo: 13, log-transformed, missing 0; "
           "libsvm: 0); per categorical field f, keys[f] uint64, offsets[f] int64 [n + 1] (sample i's bag is "
           "keys[f][offsets[f][i]:offsets[f][i + 1]]) and weights[f] float32 per key or None (every key "
           "weighs 1). A line that holds no sample (a skipped bad record) still counts in the range.")
      .def_property_readonly("skipped", &PyCtrReader::skipped, "Bad records skipped so far (bad_records='skip').")
      .def_property_readonly("path", &PyCtrReader::path);

  py::class_<PyStreamReader>(m, "StreamReader",
                             "Record positions of a data stream (a job's --data_stream folder), read from the ready "
                             "files a session's view lists (worker/stream_reader.h), as the C++ worker reads them.")
      .def(py::init<const std::string&, const std::string&, const std::string&>(), py::arg("dir"),
           py::arg("format") = "criteo", py::arg("bad_records") = "fail")
      .def("read", &PyStreamReader::Read, py::arg("session"), py::arg("first"), py::arg("count"),
           "Stream positions [first, first + count) of the files `session`'s view lists, as CtrReader.read's dict, "
           "with files: [(file, samples)], the samples' files in order (file: the index of the stream's file, "
           "as Session.end_step takes it for progressive validation). InvalidArgumentError for positions past "
           "the ready records; DataLossError or NotFoundError naming the file for one truncated, damaged or gone. "
           "It reads the session's view without the GIL: call it from the thread that drives the session (the "
           "one calling its next()), as the Trainer does, never while another thread is inside next().")
      .def_property_readonly("skipped", &PyStreamReader::skipped, "Bad records skipped so far (bad_records='skip').");

  m.def(
      "count_records",
      [](const std::string& path) {
        absl::StatusOr<int64_t> count;
        {
          py::gil_scoped_release release;
          count = data::CountLines(path);
        }
        ThrowIfError(count.status());
        return *count;
      },
      py::arg("path"), "The records (lines) of a CTR file, as the scheduler counts them for model 'ctr'.");
  m.def(
      "find_ctr_file",
      [](const std::string& dir, const std::string& format, const std::string& split) {
        absl::StatusOr<data::DataFormat> parsed = data::ParseDataFormat(format);
        ThrowIfError(parsed.status());
        absl::StatusOr<std::string> path = data::FindCtrFile(dir, *parsed, split);
        ThrowIfError(path.status());
        return *path;
      },
      py::arg("dir"), py::arg("format"), py::arg("split"),
      "The path of the `split` ('train' or 'test') file of `format` in `dir`, by the names the C++ worker "
      "looks for (data/ctr_files.h).");

  py::class_<data::ScoreHistogram>(m, "ScoreHistogram",
                                   "Predicted probabilities counted by label in fine logit bins "
                                   "(data/score_histogram.h): what report_evaluation sends for the test AUC.")
      .def(py::init<>())
      .def("add", &AddScores, py::arg("probabilities"), py::arg("labels"),
           "Counts each probability (of the positive class) under its label (> 0.5: positive). InvalidArgumentError, "
           "counting nothing, for a NaN or arrays of different sizes.")
      .def("merge", &data::ScoreHistogram::Merge, py::arg("other"))
      .def_property_readonly("count", &data::ScoreHistogram::count)
      .def_property_readonly("positives", &data::ScoreHistogram::positives)
      .def_property_readonly("negatives", &data::ScoreHistogram::negatives)
      .def(
          "auc",
          [](const data::ScoreHistogram& h) {
            absl::StatusOr<double> auc = h.Auc();
            ThrowIfError(auc.status());
            return *auc;
          },
          "The AUC of the predictions counted (within error_bound() of the exact one).")
      .def("error_bound", [](const data::ScoreHistogram& h) {
        absl::StatusOr<double> bound = h.ErrorBound();
        ThrowIfError(bound.status());
        return *bound;
      });
}

}  // namespace pstrain::python
