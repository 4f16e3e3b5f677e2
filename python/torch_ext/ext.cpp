// hopattn._torch_C: the eager fast path of hopattn's torch integration (optional; built where
// torch is installed at build time, against that torch).
//
// One function per family takes the public function's arguments as they came (Python objects,
// positionally), and when the call is a plain eager one with common argument types it runs the
// whole call in C++: torch tensors read in place (no DLPack capsules), outputs from torch's
// allocator (at::empty), the current stream from c10, the C++ entry point through _C's table
// (torch_api.hpp), and, for attention inputs that require grad, an autograd node built here whose
// backward is the bwd family. Anything else (a mode or tracer active, a tensor subclass, an
// argument of another type, a value out of range, a dtype hopattn does not take) returns
// NotImplemented before anything ran, and the caller takes the generic path, which raises the
// generic path's errors. Errors of the C++ validators are raised as the _C bindings raise them.
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <Python.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/forward_grad.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#ifdef HOPATTN_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <climits>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "arguments.hpp"
#include "hopattn/error.hpp"
#include "torch_api.hpp"

namespace hopattn::torch_ext {
namespace {

using hopattn::python::ApiError;
using hopattn::python::TorchApi;

PyObject* g_decode_entries = nullptr;  // hopattn._torch.decode.WORKSPACES._entries (a dict)
PyObject* g_decode_cache = nullptr;    // ... and the WorkspaceCache itself
PyObject* g_mla_entries = nullptr;
PyObject* g_mla_cache = nullptr;

// ---------------------------------------------------------------- the call's context
// What hopattn._torch._compat.plain_context() checks, less torch.compile (the Python caller checks
// that): no jit tracing, no dispatch or torch-function mode, no functorch transform, no
// forward-mode AD level.
bool plain_context() {
  if (torch::jit::tracer::isTracing()) return false;
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0) return false;
  if (at::impl::torch_function_mode_enabled()) return false;
  const auto included = c10::impl::tls_local_dispatch_key_set().included_;
  if (included.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) ||
      included.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode)) {
    return false;
  }
  return torch::autograd::ForwardADLevel::try_get_by_idx(0) == nullptr;
}

// ---------------------------------------------------------------- device, stream, errors
Stream stream_of(const at::Tensor& t) {
#ifdef HOPATTN_TORCH_CUDA
  if (t.is_cuda()) {
    return reinterpret_cast<Stream>(c10::cuda::getCurrentCUDAStream(t.get_device()).stream());
  }
#endif
  (void)t;
  return nullptr;
}

PyObject* exception_of(int kind) {
  switch (static_cast<ErrorKind>(kind)) {
    case ErrorKind::kValue:
      return PyExc_ValueError;
    case ErrorKind::kType:
      return PyExc_TypeError;
    case ErrorKind::kNotImplemented:
      return PyExc_NotImplementedError;
    case ErrorKind::kRuntime:
      break;
  }
  return PyExc_RuntimeError;
}

// Sets the Python exception of a failed table call; returns nullptr (for `return raise(e)`).
PyObject* raise(const ApiError& e) {
  PyErr_SetString(exception_of(e.kind), e.message);
  return nullptr;
}

// The same error thrown from C++ code that runs without the GIL (autograd's backward): torch
// translates c10's error types into the same Python exceptions.
[[noreturn]] void throw_error(const ApiError& e) {
  switch (static_cast<ErrorKind>(e.kind)) {
    case ErrorKind::kValue:
      TORCH_CHECK_VALUE(false, e.message);
    case ErrorKind::kType:
      TORCH_CHECK_TYPE(false, e.message);
    case ErrorKind::kNotImplemented:
      TORCH_CHECK_NOT_IMPLEMENTED(false, e.message);
    case ErrorKind::kRuntime:
      break;
  }
  TORCH_CHECK(false, e.message);
}

// Releases the GIL for the C++ call (the CPU reference of a large call runs for a while).
class NoGil {
 public:
  NoGil() : state_(PyEval_SaveThread()) {}
  ~NoGil() { PyEval_RestoreThread(state_); }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  PyThreadState* state_;
};

std::vector<int64_t> lead(const at::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end() - 1);
}

// out [*q.shape[:-1], d], lse float32 q.shape[:-1]: given ones as they are.
void outputs(const at::Tensor& q, int64_t d, const at::Tensor* out_given,
             const at::Tensor* lse_given, at::Tensor* out, at::Tensor* lse) {
  std::vector<int64_t> shape = lead(q);
  if (out_given != nullptr) {
    *out = *out_given;
  } else {
    shape.push_back(d);
    *out = at::empty(shape, q.options());
    shape.pop_back();
  }
  *lse = lse_given != nullptr ? *lse_given : at::empty(shape, q.options().dtype(at::kFloat));
}

PyObject* pair(const at::Tensor& a, const at::Tensor& b) {
  PyObject* x = THPVariable_Wrap(a);
  if (x == nullptr) return nullptr;
  PyObject* y = THPVariable_Wrap(b);
  if (y == nullptr) {
    Py_DECREF(x);
    return nullptr;
  }
  PyObject* t = PyTuple_New(2);
  if (t == nullptr) {
    Py_DECREF(x);
    Py_DECREF(y);
    return nullptr;
  }
  PyTuple_SET_ITEM(t, 0, x);
  PyTuple_SET_ITEM(t, 1, y);
  return t;
}

// What the out= ops' dispatch does for the tensors they write (autograd's version counters).
void bump(const at::Tensor* out, const at::Tensor* lse) {
  if (out != nullptr) torch::autograd::increment_version(*out);
  if (lse != nullptr) torch::autograd::increment_version(*lse);
}

PyObject* not_implemented() { Py_RETURN_NOTIMPLEMENTED; }

// Runs `call(stream, error)` without the GIL on `ref`'s current stream; then (out, lse), their
// versions bumped where they were given, or nullptr with the error raised.
template <typename Call>
PyObject* run_and_return(const at::Tensor& ref, const at::Tensor& out, const at::Tensor& lse,
                         const at::Tensor* out_given, const at::Tensor* lse_given, Call&& call) {
  ApiError e;
  bool ok;
  {
    const Stream s = stream_of(ref);
    NoGil nogil;
    ok = call(s, &e);
  }
  if (!ok) return raise(e);
  bump(out_given, lse_given);
  return pair(out, lse);
}

// ---------------------------------------------------------------- attention, autograd
struct AttentionParams {
  at::Tensor cu_seqlens_q, cu_seqlens_k, block_table, indptr, indices, kv_lens;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  KVLayout layout = KVLayout::kNHD;
  AttentionOptions opts;
};

const at::Tensor* ptr(const at::Tensor& t) { return t.defined() ? &t : nullptr; }

// The forward's arguments; false when a tensor is not one hopattn takes.
bool fwd_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
              const at::Tensor* sinks, const AttentionParams& p, FwdArgs* a) {
  if (!(view(&q, &a->q) && view(&k, &a->k) && view(&v, &a->v) && view(sinks, &a->sinks) &&
        index_view(ptr(p.cu_seqlens_q), &a->cu_seqlens_q) &&
        index_view(ptr(p.cu_seqlens_k), &a->cu_seqlens_k))) {
    return false;
  }
  const Pages pg{ptr(p.block_table), ptr(p.indptr), ptr(p.indices)};
  if ((pg.given() || p.kv_lens.defined()) && !page_views(pg, ptr(p.kv_lens), p.layout, &a->pages)) {
    return false;
  }
  a->max_seqlen_q = p.max_seqlen_q;
  a->max_seqlen_k = p.max_seqlen_k;
  return true;
}

// torch 2.15 holds autograd nodes in c10::intrusive_ptr, earlier versions in std::shared_ptr
// (deleted through deleteNode, which unlinks long graphs without deep recursion). The branch not
// taken is a discarded template branch, so either torch compiles this.
template <class N>
auto make_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, N>) {
    return c10::make_intrusive<N>();
  } else {
    return std::shared_ptr<N>(new N(), [](N* n) { deleteNode(n); });  // found by ADL
  }
}
template <class N>
auto node_ptr(N* n) {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, N>) {
    return c10::intrusive_ptr<torch::autograd::Node>::reclaim_copy(n);
  } else {
    return n->shared_from_this();
  }
}

class AttentionBackward final : public torch::autograd::Node {
 public:
  std::string name() const override { return "hopattn::attention_fwd_backward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const at::Tensor q = q_.unpack(), k = k_.unpack(), v = v_.unpack();
    const at::Tensor out = out_.unpack(node_ptr<torch::autograd::Node>(this)), lse = lse_;
    const at::Tensor sinks = sinks_.unpack();
    at::Tensor dout = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(out);
    at::Tensor dq = at::empty(q.sizes(), q.options());
    at::Tensor dk = at::empty(k.sizes(), k.options());
    at::Tensor dv = at::empty(v.sizes(), v.options());
    at::Tensor dsinks;
    if (sinks.defined()) dsinks = at::empty(sinks.sizes(), q.options().dtype(at::kFloat));
    BwdArgs a;
    TORCH_CHECK(fwd_args(q, k, v, ptr(sinks), params_, &a.fwd) && view(&out, &a.fwd.out) &&
                    view(&lse, &a.fwd.lse) && view(&dout, &a.dout) && view(&dq, &a.dq) &&
                    view(&dk, &a.dk) && view(&dv, &a.dv) && view(ptr(dsinks), &a.dsinks),
                "hopattn.attention backward: a saved tensor is no longer one hopattn takes");
    ApiError e;
    size_t bytes = 0;
    if (!g_api->attention_bwd_workspace_size(a, params_.opts, &bytes, &e)) throw_error(e);
    at::Tensor workspace;
    if (bytes > 0) {
      workspace = at::empty({static_cast<int64_t>(bytes)}, q.options().dtype(at::kByte));
      a.workspace = {workspace.data_ptr(), bytes};
    }
    if (!g_api->attention_bwd(a, params_.opts, stream_of(q), &e)) throw_error(e);
    torch::autograd::variable_list result{dq, dk, dv, at::Tensor()};
    if (sinks.defined() && should_compute_output(3)) result[3] = dsinks.to(sinks.scalar_type());
    return result;
  }

  void release_variables() override {
    q_.reset_data();
    k_.reset_data();
    v_.reset_data();
    out_.reset_data();
    sinks_.reset_data();
    lse_.reset();
  }

  torch::autograd::SavedVariable q_, k_, v_, out_, sinks_;
  at::Tensor lse_;  // not differentiable: saved as a plain tensor
  AttentionParams params_;
};

// attention(q, k, v, causal, window, softcap, scale, sinks, cu_seqlens_q, cu_seqlens_k,
//           max_seqlen_q, max_seqlen_k, deterministic, page_table, kv_lens, kv_layout, out,
//           lse_out): hopattn.attention's arguments, in its order.
PyObject* attention(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 18 || g_api == nullptr || !plain_context()) return not_implemented();
  const at::Tensor *q, *k, *v, *sinks, *cu_q, *cu_k, *kv_lens, *out_given, *lse_given;
  AttentionParams p;
  Pages pg;
  if (!(tensor(args[0], &q) && tensor(args[1], &k) && tensor(args[2], &v) &&
        flag(args[3], &p.opts.causal) && window(args[4], &p.opts.window) &&
        real(args[5], &p.opts.softcap) && optional_real(args[6], &p.opts.scale) &&
        optional_tensor(args[7], &sinks) && optional_tensor(args[8], &cu_q) &&
        optional_tensor(args[9], &cu_k) && optional_bound(args[10], &p.max_seqlen_q) &&
        optional_bound(args[11], &p.max_seqlen_k) && flag(args[12], &p.opts.deterministic) &&
        pages(args[13], &pg) && optional_tensor(args[14], &kv_lens) &&
        layout(args[15], &p.layout) && optional_tensor(args[16], &out_given) &&
        optional_tensor(args[17], &lse_given))) {
    return not_implemented();
  }
  if (q->dim() < 1 || v->dim() < 1) return not_implemented();
  const bool grad = requires_grad({q, k, v, sinks, cu_q, cu_k, pg.block_table, pg.indptr,
                                   pg.indices, kv_lens, out_given, lse_given});
  // out= buffers with autograd: the generic path raises.
  if (grad && (out_given != nullptr || lse_given != nullptr)) return not_implemented();
  for (const at::Tensor* t : {cu_q, cu_k, pg.block_table, pg.indptr, pg.indices, kv_lens}) {
    if (t != nullptr && t->requires_grad()) return not_implemented();
  }
  if (cu_q) p.cu_seqlens_q = *cu_q;
  if (cu_k) p.cu_seqlens_k = *cu_k;
  if (pg.block_table) p.block_table = *pg.block_table;
  if (pg.indptr) p.indptr = *pg.indptr;
  if (pg.indices) p.indices = *pg.indices;
  if (kv_lens) p.kv_lens = *kv_lens;
  FwdArgs a;
  if (!fwd_args(*q, *k, *v, sinks, p, &a)) return not_implemented();
  if (out_given && !view(out_given, &a.out)) return not_implemented();
  if (lse_given && !view(lse_given, &a.lse)) return not_implemented();

  at::Tensor out, lse;
  outputs(*q, v->size(-1), out_given, lse_given, &out, &lse);
  if (!out_given) view(&out, &a.out);
  if (!lse_given) view(&lse, &a.lse);
  ApiError e;
  bool ok;
  {
    const Stream s = stream_of(*q);
    NoGil nogil;
    ok = g_api->attention_fwd(a, p.opts, s, &e);
  }
  if (!ok) return raise(e);
  if (out_given || lse_given) {
    bump(out_given, lse_given);
  } else if (grad) {
    auto node = make_node<AttentionBackward>();
    const at::Tensor no_sinks;
    node->set_next_edges(
        torch::autograd::collect_next_edges(*q, *k, *v, sinks ? *sinks : no_sinks));
    torch::autograd::set_history(out, node);
    node->q_ = torch::autograd::SavedVariable(*q, false);
    node->k_ = torch::autograd::SavedVariable(*k, false);
    node->v_ = torch::autograd::SavedVariable(*v, false);
    node->out_ = torch::autograd::SavedVariable(out, true);
    if (sinks) node->sinks_ = torch::autograd::SavedVariable(*sinks, false);
    node->lse_ = lse;
    node->params_ = std::move(p);
  }
  return pair(out, lse);
}

// ---------------------------------------------------------------- workspaces
// The workspace of a call that needs `needed` bytes, from the family's
// hopattn._torch.workspace.WorkspaceCache (`entries`: its dict, `cache`: the object) where the
// cache serves the call (CUDA, the current device, no capture), else allocated for this call. A
// new reference to the Python workspace tensor is kept in `*holder` while the call runs.
bool cached_workspace(PyObject* entries, PyObject* cache, PyObject* ref, const at::Tensor& t,
                      Stream s, PyObject** ws_out) {
  *ws_out = nullptr;
#ifdef HOPATTN_TORCH_CUDA
  if (!t.is_cuda() || entries == nullptr) return true;
  const int device = t.get_device();
  if (device != c10::cuda::current_device() ||
      c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) {
    return true;
  }
  PyObject* key = Py_BuildValue("(iK)", device,
                                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(s)));
  if (key == nullptr) return false;
  PyObject* ws = PyDict_GetItemWithError(entries, key);  // borrowed
  Py_XINCREF(ws);
  Py_DECREF(key);
  if (ws == nullptr) {
    if (PyErr_Occurred()) return false;
    ws = PyObject_CallMethod(cache, "get", "OK", ref,
                             static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(s)));
    if (ws == nullptr) return false;
    if (ws == Py_None) {
      Py_DECREF(ws);
      return true;
    }
  }
  *ws_out = ws;
#else
  (void)entries, (void)cache, (void)ref, (void)t, (void)s;
#endif
  return true;
}

// A workspace buffer: a uint8 tensor (or none); `py` holds a reference to a Python-owned one.
struct Buffer {
  at::Tensor tensor;
  PyObject* py = nullptr;
  ~Buffer() { Py_XDECREF(py); }
  Workspace workspace() const {
    if (!tensor.defined()) return {};
    return {tensor.data_ptr(), static_cast<size_t>(tensor.numel()) * tensor.element_size()};
  }
};

// The cached workspace's current buffer (ws.buffer), or, with `needed`, one of at least that size
// (ws.reserve(needed)).
bool workspace_buffer(PyObject* ws, size_t needed, Buffer* out) {
  PyObject* buf = needed == 0 ? PyObject_GetAttrString(ws, "buffer")
                              : PyObject_CallMethod(ws, "reserve", "K",
                                                    static_cast<unsigned long long>(needed));
  if (buf == nullptr) return false;
  Py_XDECREF(out->py);
  out->py = buf;
  if (buf == Py_None) {
    out->tensor = at::Tensor();
  } else if (THPVariable_Check(buf)) {
    out->tensor = THPVariable_Unpack(buf);
  } else {
    PyErr_SetString(PyExc_TypeError, "hopattn: a cached workspace is not a tensor");
    return false;
  }
  return true;
}

// Runs `call(workspace)` (true: ran or answered; `*needed` the bytes it needs) once with the
// cached workspace and again with a large enough one when that did not suffice, as
// WorkspaceCache.run does. Returns nullptr with a Python error set, or Py_None (borrowed).
template <typename Call>
PyObject* with_workspace(const char* family, PyObject* entries, PyObject* cache, PyObject* ref,
                         const at::Tensor& t, Stream s, bool zeroed, Call&& call) {
  PyObject* ws = nullptr;
  if (!cached_workspace(entries, cache, ref, t, s, &ws)) return nullptr;
  Buffer buffer;
  if (ws != nullptr && !workspace_buffer(ws, 0, &buffer)) {
    Py_DECREF(ws);
    return nullptr;
  }
  ApiError e;
  size_t needed = 0;
  if (!call(buffer.workspace(), &needed, &e)) {
    Py_XDECREF(ws);
    return raise(e);
  }
  if (needed > buffer.workspace().bytes) {
    if (ws != nullptr) {
      if (!workspace_buffer(ws, needed, &buffer)) {
        Py_DECREF(ws);
        return nullptr;
      }
    } else {
      const auto opts = t.options().dtype(at::kByte);
      const int64_t n = static_cast<int64_t>(needed);
      buffer.tensor = zeroed ? at::zeros({n}, opts) : at::empty({n}, opts);
    }
    size_t again = 0;
    if (!call(buffer.workspace(), &again, &e)) {
      Py_XDECREF(ws);
      return raise(e);
    }
    if (again > buffer.workspace().bytes) {
      Py_XDECREF(ws);
      PyErr_Format(PyExc_RuntimeError, "hopattn.%s: the workspace size did not settle", family);
      return nullptr;
    }
  }
  Py_XDECREF(ws);
  return Py_None;
}

// The rest of a decode or mla call once its arguments are read: the outputs (out [*ref.shape[:-1],
// d], lse), the call through with_workspace, then (out, lse).
template <typename Args, typename Options>
PyObject* run_paged(const char* family, PyObject* entries, PyObject* cache, PyObject* ref_obj,
                    const at::Tensor& ref, int64_t d, const at::Tensor* out_given,
                    const at::Tensor* lse_given, bool zeroed, Args& a, const Options& opts,
                    bool (*fn)(const Args&, const Options&, Stream, size_t*, ApiError*)) {
  at::Tensor out, lse;
  outputs(ref, d, out_given, lse_given, &out, &lse);
  if (!out_given) view(&out, &a.out);
  if (!lse_given) view(&lse, &a.lse);
  const Stream s = stream_of(ref);
  PyObject* r = with_workspace(family, entries, cache, ref_obj, ref, s, zeroed,
                               [&](Workspace w, size_t* needed, ApiError* e) {
                                 a.workspace = w;
                                 NoGil nogil;
                                 return fn(a, opts, s, needed, e);
                               });
  if (r == nullptr) return nullptr;
  bump(out_given, lse_given);
  return pair(out, lse);
}

// ---------------------------------------------------------------- decode
// decode(q, k_cache, v_cache, kv_lens, page_table, causal, window, softcap, scale, sinks,
//        k_scale, v_scale, kv_layout, tree_mask, beam_width, shared_kv_lens, num_splits, out,
//        lse_out): hopattn.decode's arguments, in its order.
bool kv_scale(PyObject* obj, float* value, const at::Tensor** per_head) {
  *value = 1.f;
  *per_head = nullptr;
  if (obj == Py_None) return true;
  if (PyFloat_CheckExact(obj)) return real(obj, value);
  return tensor(obj, per_head);
}

PyObject* decode(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 19 || g_api == nullptr || !plain_context()) return not_implemented();
  const at::Tensor *q, *k_cache, *v_cache, *kv_lens, *sinks, *k_ph, *v_ph, *tree_mask, *shared,
      *out_given, *lse_given;
  Pages pg;
  DecodeOptions opts;
  DecodeArgs a;
  KVLayout kv_layout = KVLayout::kNHD;
  if (!(tensor(args[0], &q) && tensor(args[1], &k_cache) && tensor(args[2], &v_cache) &&
        tensor(args[3], &kv_lens) && args[4] != Py_None && pages(args[4], &pg) &&
        flag(args[5], &opts.causal) && window(args[6], &opts.window) &&
        real(args[7], &opts.softcap) && optional_real(args[8], &opts.scale) &&
        optional_tensor(args[9], &sinks) && kv_scale(args[10], &a.k_scale.value, &k_ph) &&
        kv_scale(args[11], &a.v_scale.value, &v_ph) && layout(args[12], &kv_layout) &&
        optional_tensor(args[13], &tree_mask) &&
        int_in(args[14], INT_MIN, INT_MAX, &opts.beam_width) &&
        optional_tensor(args[15], &shared) &&
        (args[16] == Py_None || int_in(args[16], INT_MIN, INT_MAX, &opts.num_splits)) &&
        optional_tensor(args[17], &out_given) && optional_tensor(args[18], &lse_given))) {
    return not_implemented();
  }
  if (q->dim() < 1 || v_cache->dim() < 1) return not_implemented();
  if (requires_grad({q, k_cache, v_cache, kv_lens, pg.block_table, pg.indptr, pg.indices, sinks,
                     k_ph, v_ph, tree_mask, shared, out_given, lse_given})) {
    return not_implemented();
  }
  if (!(view(q, &a.q) && view(k_cache, &a.k_cache) && view(v_cache, &a.v_cache) &&
        page_views(pg, kv_lens, kv_layout, &a.pages) && view(k_ph, &a.k_scale.per_head) &&
        view(v_ph, &a.v_scale.per_head) && view(sinks, &a.sinks) && view(tree_mask, &a.tree_mask) &&
        index_view(shared, &a.shared_kv_lens) && (!out_given || view(out_given, &a.out)) &&
        (!lse_given || view(lse_given, &a.lse)))) {
    return not_implemented();
  }
  return run_paged("decode", g_decode_entries, g_decode_cache, args[0], *q, v_cache->size(-1),
                   out_given, lse_given, /*zeroed=*/true, a, opts, g_api->decode);
}

// ---------------------------------------------------------------- mla
// mla(q_nope, q_pe, ckv, kpe, cu_seqlens_q, kv_lens, page_table, causal, scale, max_seqlen_q,
//     kv_scale, num_splits, schedule, out, lse_out): hopattn.mla's arguments, in its order.
PyObject* mla(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 15 || g_api == nullptr || !plain_context()) return not_implemented();
  const at::Tensor *q_nope, *q_pe, *ckv, *kpe, *cu_q, *kv_lens, *out_given, *lse_given;
  Pages pg;
  MlaOptions opts;
  MlaArgs a;
  if (!(tensor(args[0], &q_nope) && tensor(args[1], &q_pe) && tensor(args[2], &ckv) &&
        tensor(args[3], &kpe) && tensor(args[4], &cu_q) && tensor(args[5], &kv_lens) &&
        args[6] != Py_None && pages(args[6], &pg) && flag(args[7], &opts.causal) &&
        optional_real(args[8], &opts.scale) && optional_bound(args[9], &a.max_seqlen_q) &&
        (args[10] == Py_None || real(args[10], &a.kv_scale)) &&
        (args[11] == Py_None || int_in(args[11], 0, INT_MAX, &opts.num_splits)) &&
        mla_schedule(args[12], &opts.schedule) && optional_tensor(args[13], &out_given) &&
        optional_tensor(args[14], &lse_given))) {
    return not_implemented();
  }
  if (args[10] == Py_None) a.kv_scale = 1.f;
  if (q_nope->dim() < 1 || ckv->dim() < 1) return not_implemented();
  if (requires_grad({q_nope, q_pe, ckv, kpe, cu_q, kv_lens, pg.block_table, pg.indptr, pg.indices,
                     out_given, lse_given})) {
    return not_implemented();
  }
  if (!(view(q_nope, &a.q_nope) && view(q_pe, &a.q_pe) && view(ckv, &a.ckv) && view(kpe, &a.kpe) &&
        index_view(cu_q, &a.cu_seqlens_q) && page_views(pg, kv_lens, KVLayout::kNHD, &a.pages) &&
        (!out_given || view(out_given, &a.out)) && (!lse_given || view(lse_given, &a.lse)))) {
    return not_implemented();
  }
  return run_paged("mla", g_mla_entries, g_mla_cache, args[0], *q_nope, ckv->size(-1), out_given,
                   lse_given, /*zeroed=*/false, a, opts, g_api->mla);
}

// ---------------------------------------------------------------- merge
// merge_states(o_a, lse_a, o_b, lse_b, out, lse_out) and merge_states_n(o, lse, out, lse_out).
PyObject* merge_states(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6 || g_api == nullptr || !plain_context()) return not_implemented();
  const at::Tensor *o_a, *lse_a, *o_b, *lse_b, *out_given, *lse_given;
  if (!(tensor(args[0], &o_a) && tensor(args[1], &lse_a) && tensor(args[2], &o_b) &&
        tensor(args[3], &lse_b) && optional_tensor(args[4], &out_given) &&
        optional_tensor(args[5], &lse_given))) {
    return not_implemented();
  }
  if (requires_grad({o_a, lse_a, o_b, lse_b, out_given, lse_given})) return not_implemented();
  MergeArgs a;
  if (!(view(o_a, &a.o_a) && view(lse_a, &a.lse_a) && view(o_b, &a.o_b) && view(lse_b, &a.lse_b) &&
        (!out_given || view(out_given, &a.out)) && (!lse_given || view(lse_given, &a.lse)))) {
    return not_implemented();
  }
  const at::Tensor out = out_given ? *out_given : at::empty(o_a->sizes(), o_a->options());
  const at::Tensor lse =
      lse_given ? *lse_given : at::empty(lse_a->sizes(), o_a->options().dtype(at::kFloat));
  if (!out_given) view(&out, &a.out);
  if (!lse_given) view(&lse, &a.lse);
  return run_and_return(*o_a, out, lse, out_given, lse_given,
                        [&](Stream s, ApiError* e) { return g_api->merge_states(a, s, e); });
}

std::vector<int64_t> drop_axis1(const at::Tensor& t) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape.erase(shape.begin() + 1);
  return shape;
}

PyObject* merge_states_n(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || g_api == nullptr || !plain_context()) return not_implemented();
  const at::Tensor *o, *lse_in, *out_given, *lse_given;
  if (!(tensor(args[0], &o) && tensor(args[1], &lse_in) && optional_tensor(args[2], &out_given) &&
        optional_tensor(args[3], &lse_given))) {
    return not_implemented();
  }
  if (o->dim() < 2 || lse_in->dim() < 2) return not_implemented();
  if (requires_grad({o, lse_in, out_given, lse_given})) return not_implemented();
  MergeNArgs a;
  if (!(view(o, &a.o) && view(lse_in, &a.lse) && (!out_given || view(out_given, &a.out)) &&
        (!lse_given || view(lse_given, &a.lse_out)))) {
    return not_implemented();
  }
  const at::Tensor out = out_given ? *out_given : at::empty(drop_axis1(*o), o->options());
  const at::Tensor lse =
      lse_given ? *lse_given : at::empty(drop_axis1(*lse_in), o->options().dtype(at::kFloat));
  if (!out_given) view(&out, &a.out);
  if (!lse_given) view(&lse, &a.lse_out);
  return run_and_return(*o, out, lse, out_given, lse_given,
                        [&](Stream s, ApiError* e) { return g_api->merge_states_n(a, s, e); });
}

// ---------------------------------------------------------------- batch
// batch_run(attention, workspace, q, k_cache, v_cache, cu_seqlens_q, kv_lens, page_table, sinks,
//           k_scale, v_scale, out, lse_out): BatchAttention.run's arguments after its object's
// _C.BatchAttention and _C.Workspace (None: no device workspace held yet, which a CUDA call then
// allocates on the generic path).
PyObject* batch_run(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 13 || g_api == nullptr || !plain_context()) return not_implemented();
  const at::Tensor *q, *k_cache, *v_cache, *cu_q, *kv_lens, *table, *sinks, *k_ph, *v_ph,
      *out_given, *lse_given;
  BatchArgs a;
  if (!(tensor(args[2], &q) && tensor(args[3], &k_cache) && tensor(args[4], &v_cache) &&
        tensor(args[5], &cu_q) && tensor(args[6], &kv_lens) && tensor(args[7], &table) &&
        optional_tensor(args[8], &sinks) && kv_scale(args[9], &a.k_scale.value, &k_ph) &&
        kv_scale(args[10], &a.v_scale.value, &v_ph) && optional_tensor(args[11], &out_given) &&
        optional_tensor(args[12], &lse_given))) {
    return not_implemented();
  }
  if (q->dim() < 1 || v_cache->dim() < 1 || (q->is_cuda() && args[1] == Py_None)) {
    return not_implemented();
  }
  if (requires_grad(
          {q, k_cache, v_cache, cu_q, kv_lens, table, sinks, k_ph, v_ph, out_given, lse_given})) {
    return not_implemented();
  }
  const void* object = nullptr;
  if (!g_api->batch_object(args[0], args[1], &object, &a.workspace)) return not_implemented();
  if (!(view(q, &a.q) && view(k_cache, &a.k_cache) && view(v_cache, &a.v_cache) &&
        index_view(cu_q, &a.cu_seqlens_q) && index_view(kv_lens, &a.kv_lens) &&
        index_view(table, &a.page_table) && view(sinks, &a.sinks) &&
        view(k_ph, &a.k_scale.per_head) && view(v_ph, &a.v_scale.per_head) &&
        (!out_given || view(out_given, &a.out)) && (!lse_given || view(lse_given, &a.lse)))) {
    return not_implemented();
  }
  at::Tensor out, lse;
  outputs(*q, v_cache->size(-1), out_given, lse_given, &out, &lse);
  if (!out_given) view(&out, &a.out);
  if (!lse_given) view(&lse, &a.lse);
  return run_and_return(*q, out, lse, out_given, lse_given,
                        [&](Stream s, ApiError* e) { return g_api->batch_run(object, a, s, e); });
}

// ---------------------------------------------------------------- module
// bind(capsule, decode_workspaces, mla_workspaces): takes _C's table (hopattn._C.torch_api())
// and the families' WorkspaceCache objects. Raises ImportError for a table of another build.
PyObject* bind(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "bind(capsule, decode_workspaces, mla_workspaces)");
    return nullptr;
  }
  auto* api = static_cast<const TorchApi*>(
      PyCapsule_GetPointer(args[0], hopattn::python::kTorchApiCapsule));
  if (api == nullptr) return nullptr;
  uint32_t sizes[7];
  hopattn::python::torch_api_sizes(sizes);
  if (api->version != TorchApi::kVersion || std::memcmp(api->sizes, sizes, sizeof(sizes)) != 0) {
    PyErr_SetString(PyExc_ImportError,
                    "hopattn._torch_C: built with another hopattn._C (reinstall hopattn)");
    return nullptr;
  }
  PyObject* caches[2] = {args[1], args[2]};
  PyObject* entries[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i) {
    entries[i] = PyObject_GetAttrString(caches[i], "_entries");
    if (entries[i] == nullptr || !PyDict_Check(entries[i])) {
      Py_XDECREF(entries[0]);
      Py_XDECREF(entries[1]);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "expected WorkspaceCache objects");
      return nullptr;
    }
  }
  g_api = api;
  Py_XSETREF(g_decode_entries, entries[0]);
  Py_XSETREF(g_mla_entries, entries[1]);
  Py_INCREF(caches[0]);
  Py_INCREF(caches[1]);
  Py_XSETREF(g_decode_cache, caches[0]);
  Py_XSETREF(g_mla_cache, caches[1]);
  Py_RETURN_NONE;
}

PyObject* built_with_cuda(PyObject*, PyObject*) {
#ifdef HOPATTN_TORCH_CUDA
  Py_RETURN_TRUE;
#else
  Py_RETURN_FALSE;
#endif
}

#define HOPATTN_FASTCALL(fn) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn))

PyMethodDef kMethods[] = {
    {"bind", HOPATTN_FASTCALL(bind), METH_FASTCALL,
     "bind(capsule, decode_workspaces, mla_workspaces): takes hopattn._C's entry points."},
    {"built_with_cuda", built_with_cuda, METH_NOARGS,
     "True when this extension serves CUDA tensors (built against a CUDA torch and toolkit)."},
    {"attention", HOPATTN_FASTCALL(attention), METH_FASTCALL,
     "hopattn.attention's arguments, positionally: (out, lse), or NotImplemented."},
    {"decode", HOPATTN_FASTCALL(decode), METH_FASTCALL,
     "hopattn.decode's arguments, positionally: (out, lse), or NotImplemented."},
    {"mla", HOPATTN_FASTCALL(mla), METH_FASTCALL,
     "hopattn.mla's arguments, positionally: (out, lse), or NotImplemented."},
    {"merge_states", HOPATTN_FASTCALL(merge_states), METH_FASTCALL,
     "hopattn.merge_states' arguments, positionally: (out, lse), or NotImplemented."},
    {"merge_states_n", HOPATTN_FASTCALL(merge_states_n), METH_FASTCALL,
     "hopattn.merge_states_n's arguments, positionally: (out, lse), or NotImplemented."},
    {"batch_run", HOPATTN_FASTCALL(batch_run), METH_FASTCALL,
     "BatchAttention.run's object, workspace and arguments, positionally: (out, lse), or "
     "NotImplemented."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "_torch_C",
    "hopattn's eager torch fast path (internal; see hopattn._torch.fast).",
    -1,
    kMethods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace
}  // namespace hopattn::torch_ext

PyMODINIT_FUNC PyInit__torch_C() { return PyModule_Create(&hopattn::torch_ext::kModule); }
