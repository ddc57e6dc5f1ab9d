#include "python/serving_bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "transport/transport_security.h"
#include "python/status_errors.h"
#include "server/embedding_table.h"
#include "serving/model_export.h"
#include "serving/serve_client.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

using serving::ServeClient;

// A C-contiguous uint64 view of `keys` (a NumPy uint64 or int64 array, taken bit for bit).
py::array_t<uint64_t> KeysOf(const py::array& keys) {
  if (keys.dtype().kind() != 'u' && keys.dtype().kind() != 'i') {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
        "keys are a NumPy array of kind '", std::string(1, keys.dtype().kind()), "', expected uint64 or int64")));
  }
  if (keys.dtype().itemsize() != 8) {
    ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat("keys are ", keys.dtype().itemsize() * 8, "-bit integers, expected uint64 or int64")));
  }
  py::array flat = py::reinterpret_borrow<py::array>(keys);
  return py::array_t<uint64_t, py::array::c_style | py::array::forcecast>(flat.reshape({flat.size()}));
}

py::array_t<float> Matrix(std::vector<float> values, int64_t rows, int dim) {
  py::array_t<float> out({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(dim)});
  std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(float));
  return out;
}

py::dict InfoDict(const ModelInfo& info) {
  py::dict d;
  d["step"] = info.step();
  d["newest_step"] = info.newest_step();
  d["model"] = info.model();
  d["dense_values"] = info.dense_values();
  d["loaded_at"] = info.loaded_at();
  py::list tables;
  for (const ModelInfo::Table& t : info.tables()) {
    py::dict table;
    table["name"] = t.name();
    table["dim"] = t.dim();
    table["rows"] = t.rows();
    tables.append(table);
  }
  d["tables"] = tables;
  return d;
}

py::dict ExportDict(serving::ModelExport e) {
  py::dict d;
  d["step"] = e.manifest.step();
  d["model"] = e.manifest.job().model();
  py::dict dense;
  int64_t at = 0;
  for (const model::ParamSpec& p : e.dense.params) {
    std::vector<py::ssize_t> shape(p.shape.begin(), p.shape.end());
    py::array_t<float> a(shape);
    std::memcpy(a.mutable_data(), e.dense.values.data() + at, sizeof(float) * p.num_elements);
    at += p.num_elements;
    dense[py::str(p.name)] = a;
  }
  d["dense"] = dense;
  py::dict tables;
  for (int t = 0; t < e.manifest.tables_size(); ++t) {
    const ExportedTable& info = e.manifest.tables(t);
    py::dict table;
    table["id"] = info.id();
    table["dim"] = info.dim();
    table["seed"] = info.seed();
    table["init_bound"] = info.init_bound();
    table["row_dtype"] = TableSpec::RowDtype_Name(info.row_dtype());
    std::vector<uint64_t>& keys = e.tables[t].keys;
    py::array_t<uint64_t> k(static_cast<py::ssize_t>(keys.size()));
    std::memcpy(k.mutable_data(), keys.data(), keys.size() * sizeof(uint64_t));
    table["keys"] = k;
    table["values"] = Matrix(std::move(e.tables[t].values), static_cast<int64_t>(keys.size()), info.dim());
    tables[py::str(info.name())] = table;
  }
  d["tables"] = tables;
  return d;
}

}  // namespace

void BindServing(py::module_& m) {
  py::class_<ServeClient>(m, "ServeClient",
                          "A client of pstrain-serve: rows of the model it serves, and CTR predictions.")
      .def(py::init([](const std::string& address, double timeout_s, const std::string& tls_cert,
                       const std::string& tls_key, const std::string& tls_ca, const std::string& tls_server_name,
                       const std::string& job_token_file, bool insecure) {
             TransportSecurityOptions security;
             security.cert_file = tls_cert;
             security.key_file = tls_key;
             security.ca_file = tls_ca;
             if (!tls_server_name.empty()) security.server_name = tls_server_name;
             security.token_file = job_token_file;
             security.insecure = insecure;
             absl::StatusOr<std::shared_ptr<const TransportSecurity>> secured = TransportSecurity::Create(security);
             ThrowIfError(secured.status());
             absl::StatusOr<std::unique_ptr<ServeClient>> client =
                 ServeClient::Create(address, absl::Seconds(timeout_s), *secured);
             ThrowIfError(client.status());
             return std::move(client).value();
           }),
           py::arg("address"), py::arg("timeout_s") = 10.0, py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("tls_ca") = "", py::arg("tls_server_name") = "", py::arg("job_token_file") = "",
           py::arg("insecure") = false)
      .def(
          "lookup",
          [](ServeClient& c, const std::string& table, const py::array& keys) {
            py::array_t<uint64_t> flat = KeysOf(keys);
            absl::StatusOr<serving::LookupResult> got;
            {
              py::gil_scoped_release release;
              got = c.Lookup(table, absl::MakeConstSpan(flat.data(), static_cast<size_t>(flat.size())));
            }
            ThrowIfError(got.status());
            py::array_t<bool> found(static_cast<py::ssize_t>(got->found.size()));
            for (size_t i = 0; i < got->found.size(); ++i) found.mutable_data()[i] = got->found[i];
            const int64_t n = static_cast<int64_t>(got->found.size());
            return py::make_tuple(got->step, Matrix(std::move(got->values), n, got->dim), found);
          },
          py::arg("table"), py::arg("keys"),
          "(step, values (keys x dim float32), found (bool per key)) from one cut; keys without a row read "
          "as their initial value.")
      .def(
          "predict",
          [](ServeClient& c, const std::vector<std::string>& records) {
            absl::StatusOr<serving::PredictResult> got;
            {
              py::gil_scoped_release release;
              got = c.Predict(records);
            }
            ThrowIfError(got.status());
            py::array_t<float> p(static_cast<py::ssize_t>(got->probabilities.size()));
            std::memcpy(p.mutable_data(), got->probabilities.data(), got->probabilities.size() * sizeof(float));
            return py::make_tuple(got->step, p);
          },
          py::arg("records"), "(step, click probabilities): model 'ctr' only; records are lines of the job's format.")
      .def("model_info", [](ServeClient& c) {
        absl::StatusOr<ModelInfo> info;
        {
          py::gil_scoped_release release;
          info = c.GetModelInfo();
        }
        ThrowIfError(info.status());
        return InfoDict(*info);
      });

  m.def(
      "read_export",
      [](const std::string& dir) {
        absl::StatusOr<serving::ModelExport> e;
        {
          py::gil_scoped_release release;
          e = serving::ReadModelExport(dir);
        }
        ThrowIfError(e.status());
        return ExportDict(*std::move(e));
      },
      py::arg("dir"),
      "A model export (pstrain-export) as {'step', 'model', 'dense': {name: array}, 'tables': {name: {'id', "
      "'dim', 'seed', 'init_bound', 'row_dtype', 'keys' (uint64, ascending), 'values' (rows x dim float32)}}}.");

  m.def(
      "initial_rows",
      [](const py::array& keys, int dim, uint64_t seed, int table_id, float init_bound) {
        if (dim < 1) ThrowIfError(absl::InvalidArgumentError(absl::StrCat("dim ", dim, ", expected >= 1")));
        py::array_t<uint64_t> flat = KeysOf(keys);
        std::vector<float> values(static_cast<size_t>(flat.size()) * dim);
        for (py::ssize_t k = 0; k < flat.size(); ++k) {
          for (int j = 0; j < dim; ++j) {
            values[k * dim + j] = server::EmbeddingInitialValue(seed, table_id, flat.data()[k], j, init_bound);
          }
        }
        return Matrix(std::move(values), flat.size(), dim);
      },
      py::arg("keys"), py::arg("dim"), py::arg("seed"), py::arg("table_id"), py::arg("init_bound"),
      "The initial rows of `keys` (keys x dim float32), as a parameter server gives a key without a row.");
}

}  // namespace pstrain::python
