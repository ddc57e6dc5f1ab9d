// CTR data and evaluation in the Python extension: a reader of Criteo or libsvm record ranges
// over data::CtrSource (data/ctr_source.h), so a Python worker reads the same files into the same
// keys, dense features and labels as the C++ worker does, and data::ScoreHistogram, the
// prediction summary a worker reports with its evaluation for the job's test AUC.
#ifndef PSTRAIN_PYTHON_CTR_BINDINGS_H_
#define PSTRAIN_PYTHON_CTR_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace pstrain::python {

// Adds CtrReader, StreamReader (a data stream's records, with the files a Session's view lists),
// count_records, find_ctr_file and ScoreHistogram to `m`.
void BindCtrData(pybind11::module_& m);

}  // namespace pstrain::python

#endif  // PSTRAIN_PYTHON_CTR_BINDINGS_H_
