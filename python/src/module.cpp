// hopattn._C: the extension module. The Python package (python/hopattn) wraps these functions with
// the public keyword-only API and allocates outputs in the caller's framework.
#include <Python.h>

#include <cstdint>

#include "bindings.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"

namespace {

// hopattn.Error: what check_errors raises for a bad device-resident index a kernel met.
PyObject* g_device_error = nullptr;

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
    case hopattn::ErrorKind::kDeviceIndex:
      return g_device_error != nullptr ? g_device_error : PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

}  // namespace

NB_MODULE(_C, m) {
  namespace nb = nanobind;
  using namespace nb::literals;
  m.doc() = "hopattn's C++ entry points over DLPack tensors (internal; use the hopattn package).";

  // Same message, the Python exception that fits the kind of mistake.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const hopattn::Error& e) {
      PyErr_SetString(python_exception_of(e.kind()), e.what());
    }
  });

  g_device_error = PyErr_NewExceptionWithDoc(
      "hopattn.Error",
      "A kernel met an out-of-range device-resident index (page id, kv_len, cu_seqlens entry); "
      "raised by hopattn.check_errors(), naming the family, request, value and bound.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = nb::handle(g_device_error);
  m.def(
      "check_errors",
      [](uintptr_t stream) { hopattn::check_errors(reinterpret_cast<hopattn::Stream>(stream)); },
      "stream"_a = 0,
      "Synchronizes `stream` and raises hopattn.Error for the first bad device-resident index a "
      "kernel of this device recorded (then clears it); no-op without CUDA.");
  m.def("set_debug", &hopattn::set_debug, "enabled"_a,
        "Debug mode: validate device-resident index arrays before every CUDA launch (syncs).");
  m.def("debug_enabled", &hopattn::debug_enabled, "Whether debug mode is on.");
  m.def("built_with_cuda", &hopattn::built_with_cuda,
        "True when this build contains the GPU kernels (compiled with the CUDA toolkit).");
  m.attr("MLA_LATENT_DIM") = hopattn::kMlaLatentDim;
  m.attr("MLA_ROPE_DIM") = hopattn::kMlaRopeDim;

  hopattn::python::bind_families(m);
  hopattn::python::bind_batch(m);
  hopattn::python::bind_support(m);
  hopattn::python::bind_torch_api(m);
}
