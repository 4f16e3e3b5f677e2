#include "tensors.hpp"

#include <algorithm>
#include <string>

#include "common/dlpack_type.hpp"
#include "hopattn/error.hpp"

#ifdef HOPATTN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace hopattn::python {
namespace {

// DLPack type of a hopattn dtype name, for the (array, "name") reinterpretation form.
DLDataType dlpack_type_named(const std::string& name) {
  struct Named {
    const char* name;
    DLDataType type;
  };
  static const Named kTypes[] = {
      {"bf16", {kDLBfloat, 16, 1}},         {"fp16", {kDLFloat, 16, 1}},
      {"fp32", {kDLFloat, 32, 1}},          {"fp8_e4m3", {kDLFloat8_e4m3fn, 8, 1}},
      {"fp8_e5m2", {kDLFloat8_e5m2, 8, 1}}, {"int8", {kDLInt, 8, 1}},
      {"int32", {kDLInt, 32, 1}},           {"bool", {kDLBool, 8, 1}},
  };
  for (const Named& t : kTypes) {
    if (name == t.name) return t.type;
  }
  throw Error(ErrorKind::kType,
              "dtype override: expected one of bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, int8, int32, "
              "bool, got \"" +
                  name + "\"");
}

// Why `array` was not imported: a byte-swapped numpy array (DLPack has native order only), or
// no DLPack at all.
[[noreturn]] void not_importable(nb::handle array, const char* name, bool writable) {
  if (nb::hasattr(array, "dtype") && nb::hasattr(array.attr("dtype"), "isnative") &&
      !nb::cast<bool>(array.attr("dtype").attr("isnative"))) {
    throw Error(
        ErrorKind::kType,
        detail::concat(name, ": expected native byte order, got a byte-swapped array (dtype ",
                       nb::str(array.attr("dtype").attr("str")).c_str(),
                       "); convert it with x.astype(x.dtype.newbyteorder(\"=\"))"));
  }
  const std::string given = nb::str(nb::handle(array.type()).attr("__name__")).c_str();
  throw Error(ErrorKind::kType,
              detail::concat(name, ": expected a ", writable ? "writable " : "",
                             "tensor supporting DLPack (__dlpack__), got ", given));
}

// The view of a DLPack tensor, named `name` in the errors. int32_only: index tensors.
TensorView named_view(const DLTensor& t, const char* name, bool int32_only) {
  if (int32_only && !(t.dtype.code == kDLInt && t.dtype.bits == 32 && t.dtype.lanes == 1)) {
    throw Error(ErrorKind::kType,
                detail::concat(name, ": expected int32, got ", dlpack_type_name(t.dtype)));
  }
  try {
    return TensorView::from_dlpack(t);
  } catch (const Error& e) {
    // Say which argument was wrong; the library's message says what was expected.
    throw Error(e.kind(), detail::concat(name, ": ", e.what()));
  }
}

template <typename Array>
TensorView view_of(const Array& a, const DLDataType* override_type, const char* name,
                   bool int32_only) {
  DLTensor t{};
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.device = {static_cast<DLDeviceType>(a.device_type()), a.device_id()};
  t.ndim = static_cast<int32_t>(a.ndim());
  t.dtype = {a.dtype().code, a.dtype().bits, a.dtype().lanes};
  t.shape = const_cast<int64_t*>(a.shape_ptr());
  t.strides = const_cast<int64_t*>(a.stride_ptr());
  t.byte_offset = 0;  // nanobind's data() already includes it
  if (override_type != nullptr) {
    check(t.dtype.bits == override_type->bits && t.dtype.lanes == 1, ErrorKind::kType,
          detail::concat(name, " (reinterpreted)"),
          detail::concat("a ", int(override_type->bits), "-bit array"),
          detail::concat(int(t.dtype.bits), "-bit elements"));
    t.dtype = *override_type;
  }
  return named_view(t, name, int32_only);
}

}  // namespace

TensorView host_int32_view(uintptr_t address, int64_t length, const char* name) {
  DLTensor t{};
  t.data = reinterpret_cast<void*>(address);
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLInt, 32, 1};
  int64_t stride = 1;
  t.shape = &length;  // from_dlpack copies shape and strides into the view
  t.strides = &stride;
  return named_view(t, name, /*int32_only=*/true);
}

TensorView TensorImporter::input(nb::handle obj, const char* name) {
  return import(obj, name, /*writable=*/false);
}

TensorView TensorImporter::output(nb::handle obj, const char* name) {
  return import(obj, name, /*writable=*/true);
}

TensorView TensorImporter::index(nb::handle obj, const char* name) {
  return import(obj, name, /*writable=*/false, /*int32_only=*/true);
}

TensorView TensorImporter::import(nb::handle obj, const char* name, bool writable,
                                  bool int32_only) {
  if (obj.is_none()) return {};
  nb::handle array = obj;
  DLDataType override_type{};
  bool has_override = false;
  if (nb::isinstance<nb::tuple>(obj) && nb::len(obj) == 2 && nb::isinstance<nb::str>(obj[1])) {
    array = obj[0];
    override_type = dlpack_type_named(nb::str(obj[1]).c_str());
    has_override = true;
  }
  const DLDataType* type = has_override ? &override_type : nullptr;
  if (writable) {
    nb::ndarray<> a;
    if (!nb::try_cast(array, a, /*convert=*/false)) not_importable(array, name, writable);
    outputs_.push_back(a);
    return view_of(a, type, name, int32_only);
  }
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(array, a, /*convert=*/false)) not_importable(array, name, writable);
  inputs_.push_back(a);
  return view_of(a, type, name, int32_only);
}

PageTable import_pages(TensorImporter& tensors, nb::handle page_table, nb::handle kv_lens,
                       const std::string& kv_layout) {
  PageTable pages;
  if ((nb::isinstance<nb::tuple>(page_table) || nb::isinstance<nb::list>(page_table)) &&
      !(nb::len(page_table) == 2 && nb::isinstance<nb::str>(page_table[1]))) {
    check(nb::len(page_table) == 2, ErrorKind::kValue, "page_table",
          "a block table [B, max_pages] or a pair (page_indptr, page_indices)",
          detail::concat("a sequence of ", nb::len(page_table), " items"));
    pages.indptr = tensors.index(page_table[0], "page_indptr");
    pages.indices = tensors.index(page_table[1], "page_indices");
  } else {
    pages.block_table = tensors.index(page_table, "page_table");
  }
  pages.kv_lens = tensors.index(kv_lens, "kv_lens");
  pages.layout = layout_named(kv_layout);
  return pages;
}

KVLayout layout_named(const std::string& kv_layout) {
  if (kv_layout == "NHD") return KVLayout::kNHD;
  if (kv_layout == "HND") return KVLayout::kHND;
  throw Error(ErrorKind::kValue,
              "kv_layout: expected \"NHD\" or \"HND\", got \"" + kv_layout + "\"");
}

MlaSchedule mla_schedule_named(const std::string& schedule) {
  if (schedule == "auto") return MlaSchedule::kAuto;
  if (schedule == "seesaw") return MlaSchedule::kSeesaw;
  if (schedule == "one-consumer") return MlaSchedule::kOneConsumer;
  if (schedule == "narrow") return MlaSchedule::kNarrow;
  throw Error(ErrorKind::kValue,
              "schedule: expected \"auto\", \"seesaw\", \"one-consumer\" or \"narrow\", got \"" +
                  schedule + "\"");
}

DeviceGuard::DeviceGuard(Device device) {
  if (!device.is_cuda()) return;
#ifdef HOPATTN_WITH_CUDA
  int current = 0;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current != device.index) err = cudaSetDevice(device.index);
  if (err != cudaSuccess) {
    throw Error(ErrorKind::kRuntime,
                detail::concat("cudaSetDevice(", device.index, "): ", cudaGetErrorString(err)));
  }
  if (current != device.index) previous_ = current;
#else
  throw Error(ErrorKind::kNotImplemented,
              detail::concat("hopattn: expected CPU tensors (this build has no GPU kernels; "
                             "rebuild with the CUDA toolkit), got tensors on ",
                             device));
#endif
}

DeviceGuard::~DeviceGuard() {
#ifdef HOPATTN_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

int max_seqlen_from_host(const TensorView& cu) {
  if (!cu.defined() || cu.is_cuda() || cu.dtype() != DType::kInt32 || cu.rank() != 1) return 0;
  const int32_t* p = cu.data_as<const int32_t>();
  int64_t best = 0;
  for (int64_t i = 0; i + 1 < cu.size(0); ++i) {
    best = std::max<int64_t>(best, int64_t(p[(i + 1) * cu.stride(0)]) - p[i * cu.stride(0)]);
  }
  return static_cast<int>(best);
}

namespace {

// Largest int32 element of a host tensor (kv_lens), 0 where it cannot be read on the host.
int max_from_host(const TensorView& t) {
  if (!t.defined() || t.is_cuda() || t.dtype() != DType::kInt32 || t.rank() != 1) return 0;
  int best = 0;
  for (int64_t i = 0; i < t.size(0); ++i) {
    best = std::max(best, t.data_as<const int32_t>()[i * t.stride(0)]);
  }
  return best;
}

}  // namespace

void read_host_bounds(FwdArgs& a) {
  if (a.max_seqlen_q == 0) a.max_seqlen_q = max_seqlen_from_host(a.cu_seqlens_q);
  if (a.max_seqlen_k == 0) {
    a.max_seqlen_k =
        a.pages.defined() ? max_from_host(a.pages.kv_lens) : max_seqlen_from_host(a.cu_seqlens_k);
  }
}

void read_host_bounds(MlaArgs& a) {
  if (a.max_seqlen_q <= 0) a.max_seqlen_q = max_seqlen_from_host(a.cu_seqlens_q);
}

Workspace import_workspace(TensorImporter& tensors, nb::handle obj) {
  const TensorView t = tensors.output(obj, "workspace");
  if (!t.defined()) return {};
  return {t.data(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype())};
}

}  // namespace hopattn::python
