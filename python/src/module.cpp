// hopattn._C: the extension module. The Python package (python/hopattn) wraps these functions with
// the public keyword-only API and allocates outputs in the caller's framework.
#include <Python.h>

#include "bindings.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"

namespace {

PyObject* python_exception_of(hopattn::ErrorKind kind) {
  switch (kind) {
    case hopattn::ErrorKind::kValue:
      return PyExc_ValueError;
    case hopattn::ErrorKind::kType:
      return PyExc_TypeError;
    case hopattn::ErrorKind::kNotImplemented:
      return PyExc_NotImplementedError;
    case hopattn::ErrorKind::kRuntime:
      return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

}  // namespace

NB_MODULE(_C, m) {
  namespace nb = nanobind;
  m.doc() = "hopattn's C++ entry points over DLPack tensors (internal; use the hopattn package).";

  // Same message, the Python exception that fits the kind of mistake.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const hopattn::Error& e) {
      PyErr_SetString(python_exception_of(e.kind()), e.what());
    }
  });

  m.def("built_with_cuda", &hopattn::built_with_cuda,
        "True when this build contains the GPU kernels (compiled with the CUDA toolkit).");
  m.attr("MLA_LATENT_DIM") = hopattn::kMlaLatentDim;
  m.attr("MLA_ROPE_DIM") = hopattn::kMlaRopeDim;

  hopattn::python::bind_families(m);
  hopattn::python::bind_batch(m);
  hopattn::python::bind_support(m);
  hopattn::python::bind_torch_api(m);
}
