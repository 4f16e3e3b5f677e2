// Binding of the batch family: hopattn::BatchAttention as the class _C.BatchAttention, which the
// Python hopattn.BatchAttention wraps (python/hopattn/batch.py: keyword normalization, device
// resolution, output allocation). Tensors arrive as DLPack objects, as in families.cpp.
#include "hopattn/batch.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "hopattn/error.hpp"
#include "tensors.hpp"

#ifdef HOPATTN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace hopattn::python {

using namespace nb::literals;

namespace {

Device device_of(const std::string& type, int index) {
  if (type == "cpu") return {DeviceType::kCPU, 0};
  if (type == "cuda") return {DeviceType::kCUDA, index};
  throw Error(ErrorKind::kValue,
              "device: expected \"cpu\" or \"cuda\" (with an index), got \"" + type + "\"");
}

// The calling thread's current CUDA device, or -1 where there is none (no GPU, or a build
// without CUDA): what device=None resolves to.
int current_cuda_device() {
#ifdef HOPATTN_WITH_CUDA
  int count = 0, device = -1;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // reset the runtime's last error: a later call must not report it
    return -1;
  }
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  return device;
#else
  return -1;
#endif
}

// A workspace imported once. BatchAttention's device workspace is allocated once and never
// changes, so Python imports it here at allocation, not through DLPack on every plan() and run()
// (a torch CUDA tensor's __dlpack__ costs microseconds: it builds stream objects each call). The
// importer keeps the tensor's memory alive as long as this object lives.
struct HeldWorkspace {
  TensorImporter tensors;
  Workspace workspace;
};

// plan()'s lengths: an array (TensorImporter::index), or the pair (address, length) that
// batch.py passes for a contiguous 1-D CPU int32 torch tensor, ~0.5 us cheaper than its numpy view.
// The address is safe to read for the call: the Python caller holds the tensor, and
// BatchAttention::plan copies the lengths into its staging before it returns.
TensorView plan_lengths(TensorImporter& t, nb::handle obj, const char* name) {
  PyObject* p = obj.ptr();
  if (PyTuple_CheckExact(p) && PyTuple_GET_SIZE(p) == 2 &&
      PyLong_CheckExact(PyTuple_GET_ITEM(p, 0)) && PyLong_CheckExact(PyTuple_GET_ITEM(p, 1))) {
    const nb::tuple pair = nb::borrow<nb::tuple>(obj);
    return host_int32_view(nb::cast<uintptr_t>(pair[0]), nb::cast<int64_t>(pair[1]), name);
  }
  return t.index(obj, name);
}

}  // namespace

bool batch_object(void* attention, void* workspace, const void** object, Workspace* ws) {
  const nb::handle a(static_cast<PyObject*>(attention)), w(static_cast<PyObject*>(workspace));
  if (!nb::isinstance<BatchAttention>(a)) return false;
  *ws = {};
  if (!w.is_none()) {
    if (!nb::isinstance<HeldWorkspace>(w)) return false;
    *ws = nb::inst_ptr<HeldWorkspace>(w)->workspace;
  }
  *object = nb::inst_ptr<BatchAttention>(a);
  return true;
}

void bind_batch(nb::module_& m) {
  m.def("current_cuda_device", &current_cuda_device,
        "The current CUDA device of the calling thread, or -1 when there is none.");

  nb::class_<HeldWorkspace>(m, "Workspace",
                            "A byte tensor imported once as a workspace (kept alive), for "
                            "BatchAttention.plan() and run().")
      .def(
          "__init__",
          [](HeldWorkspace* self, nb::handle workspace) {
            // Imported before construction: a rejected tensor leaves no half-made object.
            TensorImporter t;
            const Workspace ws = import_workspace(t, workspace);
            new (self) HeldWorkspace{std::move(t), ws};
          },
          "workspace"_a)
      .def_prop_ro("nbytes", [](const HeldWorkspace& w) { return w.workspace.bytes; });

  nb::class_<BatchAttention>(m, "BatchAttention",
                             "Planner and runner of one serving step (hopattn::BatchAttention).")
      .def(
          "__init__",
          [](BatchAttention* self, int num_qo_heads, int num_kv_heads, int head_dim, int page_size,
             int head_dim_v, const std::string& kv_layout, bool causal, int window_left,
             int window_right, float softcap, std::optional<float> scale, int max_batch,
             int max_tokens, const std::string& device, int device_index) {
            BatchAttentionConfig c;
            c.num_qo_heads = num_qo_heads;
            c.num_kv_heads = num_kv_heads;
            c.head_dim = head_dim;
            c.page_size = page_size;
            c.head_dim_v = head_dim_v;
            c.kv_layout = layout_named(kv_layout);
            c.causal = causal;
            c.window = {window_left, window_right};
            c.softcap = softcap;
            c.scale = scale;
            c.max_batch = max_batch;
            c.max_tokens = max_tokens;
            c.device = device_of(device, device_index);
            new (self) BatchAttention(c);
          },
          "num_qo_heads"_a, "num_kv_heads"_a, "head_dim"_a, "page_size"_a, nb::kw_only(),
          "head_dim_v"_a = 0, "kv_layout"_a = "NHD", "causal"_a = true, "window_left"_a = -1,
          "window_right"_a = -1, "softcap"_a = 0.f, "scale"_a = nb::none(), "max_batch"_a = 256,
          "max_tokens"_a = 16384, "device"_a = "cpu", "device_index"_a = 0)
      .def(
          "plan",
          [](BatchAttention& self, nb::handle cu_seqlens_q, nb::handle kv_lens) {
            TensorImporter t;
            const TensorView cu = plan_lengths(t, cu_seqlens_q, "cu_seqlens_q");
            const TensorView kv = plan_lengths(t, kv_lens, "kv_lens");
            nb::gil_scoped_release release;
            self.plan(cu, kv);
          },
          "cu_seqlens_q"_a, "kv_lens"_a,
          "Plans a step from host int32 arrays, each an array or (address, length) of a contiguous "
          "one (CUDA configurations: run() uploads the plan).")
      .def(
          "plan",
          [](BatchAttention& self, nb::handle cu_seqlens_q, nb::handle kv_lens,
             const HeldWorkspace& workspace, uintptr_t stream) {
            TensorImporter t;
            const TensorView cu = plan_lengths(t, cu_seqlens_q, "cu_seqlens_q");
            const TensorView kv = plan_lengths(t, kv_lens, "kv_lens");
            // The upload (an event record and an async copy on `stream`) runs on the
            // configuration's device, whatever the caller's current one (no cudaSetDevice when
            // it already is).
            DeviceGuard device(self.config().device);
            nb::gil_scoped_release release;
            self.plan(cu, kv, workspace.workspace, as_stream(stream));
          },
          "cu_seqlens_q"_a, "kv_lens"_a, "workspace"_a, "stream"_a,
          "Plans a step from host int32 arrays and uploads the plan into `workspace` (a "
          "Workspace of workspace_size bytes on the configuration's CUDA device) by an "
          "asynchronous copy on `stream` (a cudaStream_t as an integer).")
      .def(
          "run",
          [](const BatchAttention& self, nb::handle q, nb::handle k_cache, nb::handle v_cache,
             nb::handle cu_seqlens_q, nb::handle kv_lens, nb::handle page_table, nb::handle out,
             nb::handle lse, nb::handle sinks, float k_scale, nb::handle k_scale_per_head,
             float v_scale, nb::handle v_scale_per_head, const HeldWorkspace* workspace,
             uintptr_t stream) {
            TensorImporter t;
            BatchArgs a;
            a.q = t.input(q, "q");
            a.k_cache = t.input(k_cache, "k_cache");
            a.v_cache = t.input(v_cache, "v_cache");
            a.cu_seqlens_q = t.index(cu_seqlens_q, "cu_seqlens_q");
            a.kv_lens = t.index(kv_lens, "kv_lens");
            a.page_table = t.index(page_table, "page_table");
            a.sinks = t.input(sinks, "sinks");
            a.k_scale = {k_scale, t.input(k_scale_per_head, "k_scale")};
            a.v_scale = {v_scale, t.input(v_scale_per_head, "v_scale")};
            a.out = t.output(out, "out");
            a.lse = t.output(lse, "lse");
            if (workspace != nullptr) a.workspace = workspace->workspace;
            DeviceGuard device(a.q.device());
            nb::gil_scoped_release release;
            self.run(a, as_stream(stream));
          },
          "q"_a, "k_cache"_a, "v_cache"_a, "cu_seqlens_q"_a, "kv_lens"_a, "page_table"_a, "out"_a,
          "lse"_a, nb::kw_only(), "sinks"_a = nb::none(), "k_scale"_a = 1.f,
          "k_scale_per_head"_a = nb::none(), "v_scale"_a = 1.f, "v_scale_per_head"_a = nb::none(),
          nb::arg("workspace").none() = nb::none(), "stream"_a = 0,
          "Writes the planned step's attention into out and lse (caller-allocated).")
      .def_prop_ro("plan_buffer_size",
                   [](const BatchAttention& self) { return self.plan_buffer_size(); })
      .def_prop_ro("workspace_size",
                   [](const BatchAttention& self) { return self.workspace_size(); })
      .def_prop_ro("planned", [](const BatchAttention& self) {
        const BatchPlanSummary& s = self.planned();
        nb::dict d;
        d["batch"] = s.batch;
        d["total_q"] = s.total_q;
        d["num_items"] = s.num_items;
        d["num_merges"] = s.num_merges;
        d["num_splits_max"] = s.num_splits_max;
        d["plan_bytes"] = s.plan_bytes;
        d["decodes_spread"] = s.decodes_spread;
        d["num_side_items"] = s.num_side_items;
        d["partition_ctas"] = s.partition_ctas;
        d["concurrent_ctas"] = s.concurrent_ctas;
        return d;
      });
}

}  // namespace hopattn::python
