// Serving in the Python extension: a client of pstrain-serve (serving/serve_client.h) as
// pstrain.ServeClient, a model export read into NumPy (serving/model_export.h) as
// pstrain.read_export, and the initial value of rows without one (server/embedding_table.h), which
// pstrain.torch gives keys an export has no row for.
#ifndef PSTRAIN_PYTHON_SERVING_BINDINGS_H_
#define PSTRAIN_PYTHON_SERVING_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace pstrain::python {

// Adds ServeClient, read_export and initial_rows to `m`.
void BindServing(pybind11::module_& m);

}  // namespace pstrain::python

#endif  // PSTRAIN_PYTHON_SERVING_BINDINGS_H_
