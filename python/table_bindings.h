// Embedding tables in the Python extension: table declarations from Python dicts (what
// pstrain.torch's modules declare), the job's tables as dicts, and the session's rows as NumPy
// views (TrainingSession::PullRows, rows, row_gradient; worker/training_session.h).
#ifndef PSTRAIN_PYTHON_TABLE_BINDINGS_H_
#define PSTRAIN_PYTHON_TABLE_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <vector>

#include "proto/job.pb.h"
#include "worker/training_session.h"

namespace pstrain::python {

// A table declaration from a dict: "name" and "dim" (required), "init_bound" (a float; None or
// absent: unset), "optimizer" (None or absent: unset; a type name such as "sgd"; or a dict of
// SparseOptimizerSpec's fields by name, "type" a name) and "admit" (None or absent: unset, the
// job's; "always", "count:N" or "probability:P", common/table_spec.h ParseAdmission) and "evict"
// (None or absent: the job's; a dict of EvictionSpec's fields, "order" "lru" or "lfu"). Throws StatusError
// (INVALID_ARGUMENT) naming the table and the field for an unknown key or a value of the wrong type.
std::vector<TableSpec> TableSpecsOf(const pybind11::list& tables);

// {"name", "dim", "init_bound" (None when unset: 1/sqrt(dim)), "optimizer" (its type's name),
// "lr", "admit" (AdmissionName), "evict" (None, or the EvictionSpec as a dict)}.
pybind11::dict TableDict(const TableSpec& table);

// Adds to `session` the table methods (num_tables, tables, pull_rows, rows, row_gradient) and to
// `m` unique_keys.
void BindTables(pybind11::module_& m, pybind11::class_<worker::TrainingSession>& session);

}  // namespace pstrain::python

#endif  // PSTRAIN_PYTHON_TABLE_BINDINGS_H_
