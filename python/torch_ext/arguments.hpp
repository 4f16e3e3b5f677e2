// The fast path's argument readers (ext.cpp): each turns one Python argument into its C++ form
// and returns false for anything it does not take as it stands (the call then goes to the generic
// path, which raises that path's errors).
#pragma once

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include <climits>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>

#include "torch_api.hpp"

namespace hopattn::torch_ext {
namespace {

// _C's table of entry points (torch_api.hpp), set when the module is bound.
const hopattn::python::TorchApi* g_api = nullptr;

// ---------------------------------------------------------------- arguments
// Each reader returns false (the generic path then takes the call) for anything but the common
// exact types; the generic path raises the errors for wrong ones.

// A plain torch.Tensor or nn.Parameter, strided, on CPU (or CUDA where this build has it).
bool tensor(PyObject* obj, const at::Tensor** out) {
  if (!THPVariable_CheckTypeExact(Py_TYPE(obj))) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) return false;
#ifdef HOPATTN_TORCH_CUDA
  if (!(t.is_cpu() || t.is_cuda())) return false;
#else
  if (!t.is_cpu()) return false;
#endif
  *out = &t;
  return true;
}

// None -> nullptr.
bool optional_tensor(PyObject* obj, const at::Tensor** out) {
  if (obj == Py_None) {
    *out = nullptr;
    return true;
  }
  return tensor(obj, out);
}

bool flag(PyObject* obj, bool* out) {
  if (obj != Py_True && obj != Py_False) return false;
  *out = obj == Py_True;
  return true;
}

bool int_in(PyObject* obj, long long lo, long long hi, int* out) {
  if (!PyLong_CheckExact(obj)) return false;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0 || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// None -> 0 (not given).
bool optional_bound(PyObject* obj, int* out) {
  if (obj == Py_None) {
    *out = 0;
    return true;
  }
  return int_in(obj, 0, INT_MAX, out);
}

bool real(PyObject* obj, float* out) {
  if (!PyFloat_CheckExact(obj)) return false;
  *out = static_cast<float>(PyFloat_AS_DOUBLE(obj));
  return true;
}

bool optional_real(PyObject* obj, std::optional<float>* out) {
  if (obj == Py_None) {
    out->reset();
    return true;
  }
  float v = 0.f;
  if (!real(obj, &v)) return false;
  *out = v;
  return true;
}

bool window(PyObject* obj, Window* out) {
  if (!PyTuple_CheckExact(obj) || PyTuple_GET_SIZE(obj) != 2) return false;
  return int_in(PyTuple_GET_ITEM(obj, 0), -1, INT_MAX, &out->left) &&
         int_in(PyTuple_GET_ITEM(obj, 1), -1, INT_MAX, &out->right);
}

bool layout(PyObject* obj, KVLayout* out) {
  if (!PyUnicode_CheckExact(obj)) return false;
  if (PyUnicode_CompareWithASCIIString(obj, "NHD") == 0) {
    *out = KVLayout::kNHD;
  } else if (PyUnicode_CompareWithASCIIString(obj, "HND") == 0) {
    *out = KVLayout::kHND;
  } else {
    return false;
  }
  return true;
}

// hopattn.mla's schedule= name (anything else: the generic path says what was expected).
bool mla_schedule(PyObject* obj, MlaSchedule* out) {
  if (!PyUnicode_CheckExact(obj)) return false;
  if (PyUnicode_CompareWithASCIIString(obj, "auto") == 0) {
    *out = MlaSchedule::kAuto;
  } else if (PyUnicode_CompareWithASCIIString(obj, "seesaw") == 0) {
    *out = MlaSchedule::kSeesaw;
  } else if (PyUnicode_CompareWithASCIIString(obj, "one-consumer") == 0) {
    *out = MlaSchedule::kOneConsumer;
  } else if (PyUnicode_CompareWithASCIIString(obj, "narrow") == 0) {
    *out = MlaSchedule::kNarrow;
  } else {
    return false;
  }
  return true;
}

bool dl_type(c10::ScalarType s, DLDataType* out) {
  switch (s) {
    case c10::kBFloat16:
      *out = {kDLBfloat, 16, 1};
      return true;
    case c10::kHalf:
      *out = {kDLFloat, 16, 1};
      return true;
    case c10::kFloat:
      *out = {kDLFloat, 32, 1};
      return true;
    case c10::kFloat8_e4m3fn:
      *out = {kDLFloat8_e4m3fn, 8, 1};
      return true;
    case c10::kFloat8_e5m2:
      *out = {kDLFloat8_e5m2, 8, 1};
      return true;
    case c10::kChar:
      *out = {kDLInt, 8, 1};
      return true;
    case c10::kByte:
      *out = {kDLUInt, 8, 1};
      return true;
    case c10::kInt:
      *out = {kDLInt, 32, 1};
      return true;
    case c10::kBool:
      *out = {kDLBool, 8, 1};
      return true;
    default:
      return false;
  }
}

// The view _C's importer would make of the tensor's DLPack export (nullptr -> undefined view).
bool view(const at::Tensor* t, TensorView* out) {
  if (t == nullptr) {
    *out = TensorView();
    return true;
  }
  DLTensor d{};
  if (!dl_type(t->scalar_type(), &d.dtype)) return false;
  d.data = t->data_ptr();
  d.device = {t->is_cuda() ? kDLCUDA : kDLCPU, t->is_cuda() ? t->get_device() : 0};
  d.ndim = static_cast<int32_t>(t->dim());
  d.shape = const_cast<int64_t*>(t->sizes().data());
  d.strides = const_cast<int64_t*>(t->strides().data());
  return g_api->view(d, out);
}

// Index tensors are int32 (the generic path names any other dtype).
bool index_view(const at::Tensor* t, TensorView* out) {
  if (t != nullptr && t->scalar_type() != c10::kInt) return false;
  return view(t, out);
}

// A page table: None, a block table, or a pair (indptr, indices) of tensors.
struct Pages {
  const at::Tensor* block_table = nullptr;
  const at::Tensor* indptr = nullptr;
  const at::Tensor* indices = nullptr;
  bool given() const { return block_table || indptr || indices; }
};

bool pages(PyObject* obj, Pages* out) {
  if (obj == Py_None) return true;
  if (PyTuple_CheckExact(obj) || PyList_CheckExact(obj)) {
    if (PySequence_Fast_GET_SIZE(obj) != 2) return false;
    PyObject** items = PySequence_Fast_ITEMS(obj);
    return tensor(items[0], &out->indptr) && tensor(items[1], &out->indices);
  }
  return tensor(obj, &out->block_table);
}

bool page_views(const Pages& p, const at::Tensor* kv_lens, KVLayout layout, PageTable* out) {
  out->layout = layout;
  return index_view(p.block_table, &out->block_table) && index_view(p.indptr, &out->indptr) &&
         index_view(p.indices, &out->indices) && index_view(kv_lens, &out->kv_lens);
}

bool requires_grad(std::initializer_list<const at::Tensor*> tensors) {
  if (!c10::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : tensors) {
    if (t != nullptr && t->requires_grad()) return true;
  }
  return false;
}

}  // namespace
}  // namespace hopattn::torch_ext
