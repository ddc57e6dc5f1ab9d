#include "python/table_bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/table_spec.h"
#include "python/status_errors.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

using worker::TrainingSession;

[[noreturn]] void Invalid(const std::string& message) { throw StatusError(absl::InvalidArgumentError(message)); }

float FloatField(const py::handle& value, const std::string& what) {
  if (!py::isinstance<py::float_>(value) && !py::isinstance<py::int_>(value)) {
    Invalid(absl::StrCat(what, ": got ", std::string(py::str(value.get_type())), ", expected a number"));
  }
  return value.cast<float>();
}

SparseOptimizerSpec::Type OptimizerType(const py::handle& value, const std::string& what) {
  if (!py::isinstance<py::str>(value)) Invalid(absl::StrCat(what, ": expected a type name such as \"adagrad\""));
  absl::StatusOr<SparseOptimizerSpec::Type> type = ParseSparseOptimizer(value.cast<std::string>());
  if (!type.ok()) Invalid(absl::StrCat(what, ": ", type.status().message()));
  return *type;
}

SparseOptimizerSpec OptimizerOf(const py::handle& value, const std::string& what) {
  SparseOptimizerSpec spec;
  if (py::isinstance<py::str>(value)) {
    spec.set_type(OptimizerType(value, what));
    return spec;
  }
  if (!py::isinstance<py::dict>(value)) Invalid(absl::StrCat(what, ": expected None, a type name or a dict"));
  for (const auto& [key, field] : value.cast<py::dict>()) {
    const std::string name = py::str(key);
    const std::string where = absl::StrCat(what, ".", name);
    if (name == "type") {
      spec.set_type(OptimizerType(field, where));
    } else if (name == "lr") {
      spec.set_lr(FloatField(field, where));
    } else if (name == "initial_accumulator") {
      spec.set_initial_accumulator(FloatField(field, where));
    } else if (name == "epsilon") {
      spec.set_epsilon(FloatField(field, where));
    } else if (name == "beta1") {
      spec.set_beta1(FloatField(field, where));
    } else if (name == "beta2") {
      spec.set_beta2(FloatField(field, where));
    } else if (name == "ftrl_beta") {
      spec.set_ftrl_beta(FloatField(field, where));
    } else if (name == "l1") {
      spec.set_l1(FloatField(field, where));
    } else if (name == "l2") {
      spec.set_l2(FloatField(field, where));
    } else {
      Invalid(absl::StrCat(what, ": unknown field '", name,
                           "' (expected type, lr, initial_accumulator, epsilon, beta1, beta2, ftrl_beta, l1, l2)"));
    }
  }
  return spec;
}

int64_t IntField(const py::handle& value, const std::string& what) {
  if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value))
    Invalid(absl::StrCat(what, ": expected an int"));
  return value.cast<int64_t>();
}

// An eviction policy from a dict of EvictionSpec's fields ("order": "lru" or "lfu").
EvictionSpec EvictionOf(const py::handle& value, const std::string& what) {
  if (!py::isinstance<py::dict>(value)) {
    Invalid(absl::StrCat(what, ": expected None or a dict such as {'ttl_updates': 1000, 'max_rows': 100000}"));
  }
  EvictionSpec spec;
  for (const auto& [key, field] : value.cast<py::dict>()) {
    const std::string name = py::str(key);
    const std::string where = absl::StrCat(what, ".", name);
    if (name == "ttl_updates") {
      spec.set_ttl_updates(IntField(field, where));
    } else if (name == "ttl_seconds") {
      spec.set_ttl_seconds(IntField(field, where));
    } else if (name == "max_rows") {
      spec.set_max_rows(IntField(field, where));
    } else if (name == "keep_rows") {
      spec.set_keep_rows(IntField(field, where));
    } else if (name == "every_updates") {
      spec.set_every_updates(IntField(field, where));
    } else if (name == "min_l2_norm") {
      spec.set_min_l2_norm(FloatField(field, where));
    } else if (name == "order") {
      const std::string order = py::isinstance<py::str>(field) ? field.cast<std::string>() : "";
      if (order != "lru" && order != "lfu") Invalid(absl::StrCat(where, ": expected 'lru' or 'lfu'"));
      spec.set_order(order == "lfu" ? EvictionSpec::LFU : EvictionSpec::LRU);
    } else {
      Invalid(absl::StrCat(
          what, ": unknown field '", name,
          "' (expected ttl_updates, ttl_seconds, max_rows, order, min_l2_norm, keep_rows, every_updates)"));
    }
  }
  return spec;
}

// A C-contiguous 1-D array of 64-bit keys as uint64 (int64 keys are taken bit for bit: torch has
// no uint64 tensors, so keys above 2^63 arrive as negative int64s).
absl::Span<const uint64_t> KeysOf(const py::array& keys, const std::string& what) {
  const py::dtype dtype = keys.dtype();
  if (!dtype.is(py::dtype::of<uint64_t>()) && !dtype.is(py::dtype::of<int64_t>())) {
    Invalid(absl::StrCat(what, ": dtype ", std::string(py::str(keys.dtype())), ", expected uint64 or int64"));
  }
  if (!(keys.flags() & py::array::c_style)) Invalid(absl::StrCat(what, ": not C-contiguous"));
  return absl::MakeConstSpan(static_cast<const uint64_t*>(keys.data()), static_cast<size_t>(keys.size()));
}

void CheckTable(const TrainingSession& s, int table) {
  if (table < 0 || table >= s.num_tables()) {
    Invalid(absl::StrCat("table id ", table, ": expected one in [0, ", s.num_tables(), ") (the job's tables)"));
  }
}

// A (keys x dim) view of one of the session's row buffers, kept alive by `self`; a fresh empty
// array when the table has no keys (an empty buffer has no address to view).
py::array_t<float> RowsView(py::object self, absl::Span<float> buffer, int dim) {
  const py::ssize_t n = static_cast<py::ssize_t>(buffer.size()) / dim;
  if (n == 0) return py::array_t<float>(std::vector<py::ssize_t>{0, dim});
  return py::array_t<float>({n, static_cast<py::ssize_t>(dim)},
                            {static_cast<py::ssize_t>(dim * sizeof(float)), static_cast<py::ssize_t>(sizeof(float))},
                            buffer.data(), self);
}

// (sorted distinct keys, position of each key among them): a batch's keys as PullRows wants them,
// and the index that maps every lookup to its row. uint64 order, whatever the dtype.
py::tuple UniqueKeys(const py::array& keys) {
  const absl::Span<const uint64_t> k = KeysOf(keys, "keys");
  std::vector<int64_t> order(k.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return k[a] < k[b]; });
  std::vector<py::ssize_t> shape(keys.shape(), keys.shape() + keys.ndim());
  py::array_t<int64_t> inverse(shape);
  int64_t* inv = inverse.mutable_data();
  std::vector<uint64_t> distinct;
  for (int64_t i : order) {
    if (distinct.empty() || distinct.back() != k[i]) distinct.push_back(k[i]);
    inv[i] = static_cast<int64_t>(distinct.size()) - 1;
  }
  py::array_t<uint64_t> unique(static_cast<py::ssize_t>(distinct.size()));
  std::copy(distinct.begin(), distinct.end(), unique.mutable_data());
  return py::make_tuple(unique, inverse);
}

}  // namespace

std::vector<TableSpec> TableSpecsOf(const py::list& tables) {
  std::vector<TableSpec> specs;
  for (size_t i = 0; i < tables.size(); ++i) {
    const py::handle item = tables[i];
    std::string what = absl::StrCat("tables[", i, "]");
    if (!py::isinstance<py::dict>(item)) Invalid(absl::StrCat(what, ": expected a dict"));
    const py::dict d = item.cast<py::dict>();
    if (!d.contains("name") || !py::isinstance<py::str>(d["name"])) {
      Invalid(absl::StrCat(what, ": expected a \"name\" (a str)"));
    }
    TableSpec& spec = specs.emplace_back();
    spec.set_name(d["name"].cast<std::string>());
    what = absl::StrCat("table '", spec.name(), "'");
    for (const auto& [key, value] : d) {
      const std::string name = py::str(key);
      if (name == "name") continue;
      if (name == "dim") {
        if (!py::isinstance<py::int_>(value)) Invalid(absl::StrCat(what, ": dim is not an int"));
        spec.set_dim(value.cast<int>());
      } else if (name == "init_bound") {
        if (!value.is_none()) spec.set_init_bound(FloatField(value, absl::StrCat(what, ": init_bound")));
      } else if (name == "optimizer") {
        if (!value.is_none()) *spec.mutable_optimizer() = OptimizerOf(value, absl::StrCat(what, ": optimizer"));
      } else if (name == "admit") {
        if (value.is_none()) continue;
        if (!py::isinstance<py::str>(value)) {
          Invalid(absl::StrCat(what, ": admit is not a str (expected always, count:N or probability:P)"));
        }
        absl::StatusOr<AdmissionSpec> admission = ParseAdmission(value.cast<std::string>());
        if (!admission.ok()) Invalid(absl::StrCat(what, ": ", admission.status().message()));
        *spec.mutable_admission() = *admission;
      } else if (name == "evict") {
        if (!value.is_none()) *spec.mutable_eviction() = EvictionOf(value, absl::StrCat(what, ": evict"));
      } else if (name == "row_dtype") {
        if (value.is_none()) continue;
        if (!py::isinstance<py::str>(value))
          Invalid(absl::StrCat(what, ": row_dtype is not a str (expected fp32, fp16 or bf16)"));
        absl::StatusOr<TableSpec::RowDtype> dtype = ParseRowDtype(value.cast<std::string>());
        if (!dtype.ok()) Invalid(absl::StrCat(what, ": ", dtype.status().message()));
        spec.set_row_dtype(*dtype);
      } else {
        Invalid(absl::StrCat(what, ": unknown field '", name,
                             "' (expected name, dim, init_bound, optimizer, admit, evict, row_dtype)"));
      }
    }
    if (!d.contains("dim")) Invalid(absl::StrCat(what, ": expected a \"dim\""));
  }
  return specs;
}

py::dict TableDict(const TableSpec& table) {
  py::dict d;
  d["name"] = table.name();
  d["dim"] = table.dim();
  d["init_bound"] = table.has_init_bound() ? py::object(py::float_(table.init_bound())) : py::object(py::none());
  d["optimizer"] = SparseOptimizerTypeName(table.optimizer().type());
  d["lr"] = table.optimizer().lr();
  d["admit"] = AdmissionName(table.admission());
  d["row_dtype"] = RowDtypeName(RowDtypeOf(table));
  if (EvictionOn(table.eviction())) {
    const EvictionSpec& e = table.eviction();
    py::dict evict;
    evict["ttl_updates"] = e.ttl_updates();
    evict["ttl_seconds"] = e.ttl_seconds();
    evict["max_rows"] = e.max_rows();
    evict["order"] = e.order() == EvictionSpec::LFU ? "lfu" : "lru";
    evict["min_l2_norm"] = e.min_l2_norm();
    evict["keep_rows"] = e.keep_rows();
    evict["every_updates"] = e.every_updates();
    d["evict"] = evict;
  } else {
    d["evict"] = py::none();
  }
  return d;
}

void BindTables(py::module_& m, py::class_<TrainingSession>& session) {
  m.def("unique_keys", &UniqueKeys, py::arg("keys"),
        "(distinct keys ascending as uint64, index of each key among them shaped like keys) for an int64 or "
        "uint64 array: what pull_rows wants, and the row of every lookup.");
  session.def_property_readonly("num_tables", &TrainingSession::num_tables)
      .def_property_readonly(
          "tables",
          [](const TrainingSession& s) {
            py::list tables;
            for (const TableSpec& t : s.job().tables()) tables.append(TableDict(t));
            return tables;
          },
          "The job's embedding tables (table id = position), as dicts.")
      .def(
          "pull_rows",
          [](TrainingSession& s, const py::list& keys, std::optional<std::vector<int>> tables) {
            std::vector<absl::Span<const uint64_t>> spans;
            for (size_t i = 0; i < keys.size(); ++i) {
              const int t = tables.has_value() && i < tables->size() ? (*tables)[i] : static_cast<int>(i);
              spans.push_back(KeysOf(keys[i].cast<py::array>(), absl::StrCat("keys of table ", t)));
            }
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = tables.has_value() ? s.PullRows(*tables, spans) : s.PullRows(spans);
            }
            ThrowIfError(status);
          },
          py::arg("keys"), py::arg("tables") = py::none(),
          "Pulls the rows of the keys (uint64 or int64 arrays, strictly ascending as uint64): keys[i] of table "
          "tables[i], or of table i when tables is None (every table). In a training step (after begin_step) "
          "or an evaluation. Other tables keep this step's rows.")
      .def(
          "rows",
          [](py::object self, int table) {
            auto& s = self.cast<TrainingSession&>();
            CheckTable(s, table);
            return RowsView(self, s.rows(table), s.job().tables(table).dim());
          },
          py::arg("table"),
          "Table `table`'s pulled rows, (keys x dim) float32, row i for key i: a view of the session's buffer, "
          "valid until the table is pulled again or the next step begins.")
      .def(
          "row_gradient",
          [](py::object self, int table) {
            auto& s = self.cast<TrainingSession&>();
            CheckTable(s, table);
            return RowsView(self, s.row_gradient(table), s.job().tables(table).dim());
          },
          py::arg("table"),
          "Where the loop writes the gradient of the mean loss for each pulled row (zeroed by the pull; a view, "
          "valid as rows'); end_step pushes it.");
}

}  // namespace pstrain::python
