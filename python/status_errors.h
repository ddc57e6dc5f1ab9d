// absl::Status across the Python boundary: a non-OK status becomes a Python exception of the
// pstrain package whose class says the code (ValueError for INVALID_ARGUMENT, as Python users
// expect), and a Python exception becomes a status to report to the scheduler.
#ifndef PSTRAIN_PYTHON_STATUS_ERRORS_H_
#define PSTRAIN_PYTHON_STATUS_ERRORS_H_

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "absl/status/status.h"

namespace pstrain::python {

// Thrown by the bindings; translated to the Python class for its code.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(absl::Status status)
      : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

// Adds the exception classes to `m` (Error; InvalidArgumentError, also a ValueError;
// FailedPreconditionError; AbortedError; UnavailableError; DeadlineExceededError) and the
// translator of StatusError to them. Each instance carries `code`, the status code's name.
void RegisterStatusErrors(pybind11::module_& m);

// The status for a Python exception: its own code when it is one of the classes above, UNKNOWN
// "<class>: <message>" otherwise.
absl::Status StatusOfException(const pybind11::object& error);

}  // namespace pstrain::python

#endif  // PSTRAIN_PYTHON_STATUS_ERRORS_H_
