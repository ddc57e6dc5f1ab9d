#include "python/status_errors.h"

#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

// The classes, by code; created once per process (the module is imported once). Leaked on
// purpose: they live as long as the interpreter.
std::map<absl::StatusCode, PyObject*>* classes = nullptr;
PyObject* base_class = nullptr;

PyObject* NewClass(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  PyObject* cls = PyErr_NewExceptionWithDoc(absl::StrCat("pstrain._core.", name).c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));
  return cls;
}

}  // namespace

void RegisterStatusErrors(py::module_& m) {
  classes = new std::map<absl::StatusCode, PyObject*>();
  base_class = NewClass(m, "Error", PyExc_RuntimeError, "An error of pstrain; `code` names its kind.");
  auto sub = [&m](const char* name, absl::StatusCode code, PyObject* also, const char* doc) {
    PyObject* bases = also == nullptr ? PyTuple_Pack(1, base_class) : PyTuple_Pack(2, base_class, also);
    (*classes)[code] = NewClass(m, name, bases, doc);
    Py_DECREF(bases);
  };
  sub("InvalidArgumentError", absl::StatusCode::kInvalidArgument, PyExc_ValueError,
      "A bad argument: a shape, a dtype, a name or a size that does not match the job.");
  sub("FailedPreconditionError", absl::StatusCode::kFailedPrecondition, nullptr,
      "A call at the wrong time, or from a worker that is no longer a member of the job.");
  sub("AbortedError", absl::StatusCode::kAborted, nullptr, "The job failed.");
  sub("UnavailableError", absl::StatusCode::kUnavailable, nullptr, "The scheduler or a server cannot be reached.");
  sub("DeadlineExceededError", absl::StatusCode::kDeadlineExceeded, nullptr, "A wait ran out of time.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      auto it = classes->find(e.status().code());
      PyObject* cls = it == classes->end() ? base_class : it->second;
      py::object error = py::reinterpret_borrow<py::object>(cls)(std::string(e.status().message()));
      error.attr("code") = absl::StatusCodeToString(e.status().code());
      PyErr_SetObject(cls, error.ptr());
    }
  });
}

absl::Status StatusOfException(const py::object& error) {
  const std::string message = py::str(error);
  if (base_class != nullptr && PyObject_IsInstance(error.ptr(), base_class) == 1) {
    for (const auto& [code, cls] : *classes) {
      if (PyObject_IsInstance(error.ptr(), cls) == 1) return absl::Status(code, message);
    }
  }
  const std::string type = py::str(py::type::handle_of(error).attr("__name__"));
  return absl::UnknownError(absl::StrCat(type, ": ", message));
}

}  // namespace pstrain::python
