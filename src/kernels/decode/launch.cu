// Host side of the decode kernel: TensorViews -> Params and the launch, following the launch plan
// of src/plan/decode_plan.hpp (CTA shape, split count, workspace layout) for the device's SM
// count. The kernels themselves are instantiated per row of configs.hpp in hd<D>.cu, so a 2-core
// build compiles them in parallel.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "hopattn/error.hpp"
#include "kernels/common/cuda_host.hpp"
#include "kernels/common/device_status_host.hpp"
#include "kernels/decode/configs.cuh"
#include "kernels/decode/launch.hpp"

namespace hopattn::kernels::decode {

namespace {

constexpr const char* kWhere = "hopattn.decode";

void check_cuda(cudaError_t status, const char* what) { throw_if_cuda_error(status, kWhere, what); }

[[noreturn]] void not_supported(const std::string& what, const std::string& given) {
  throw Error(ErrorKind::kNotImplemented,
              detail::concat("hopattn.decode (GPU): expected ", what, ", got ", given));
}

// The row of configs.hpp's kKvFormats whose cache dtype (with q's) is kv.
KvFormat kv_format(DType q, DType kv) {
  const KvFormat f = kv_format_of(kv);
  if (f == KvFormat::kNative16 && kv != q) {
    not_supported("a 16-bit KV cache of q's dtype", dtype_name(kv));
  }
  return f;
}

// cp.async copies 16-byte pieces: rows (and the base) must be 16-byte aligned.
void require_16b_rows(const TensorView& t, const char* name) {
  const int64_t elem = dtype_size(t.dtype());
  bool ok =
      reinterpret_cast<uintptr_t>(t.data()) % 16 == 0 && (t.size(-1) == 1 || t.stride(-1) == 1);
  for (int i = 0; i + 1 < t.rank(); ++i)
    ok = ok && (t.size(i) == 1 || (t.stride(i) * elem) % 16 == 0);
  if (!ok) not_supported(detail::concat(name, " with 16-byte aligned rows"), t.shape_string());
}

}  // namespace

LaunchPlan device_plan(const DecodeArgs& a, const DecodeOptions& o) {
  return plan::plan_decode(a, o, sm_count(a.q.device().index, kWhere));
}

void launch(const DecodeArgs& a, const DecodeOptions& o, const LaunchPlan& pl, Stream stream) {
  const TensorView& q = a.q;
  const bool nhd = a.pages.layout == KVLayout::kNHD;
  const int64_t d = q.size(3);
  const int64_t hkv = nhd ? a.k_cache.size(2) : a.k_cache.size(1);
  const KvFormat format = kv_format(q.dtype(), a.k_cache.dtype());
  if (a.v_cache.dtype() != a.k_cache.dtype() || a.v_cache.size(-1) != d) {
    not_supported("v_cache of k_cache's dtype and head dim", a.v_cache.shape_string());
  }
  require_16b_rows(q, "q");
  require_16b_rows(a.out, "out");
  require_16b_rows(a.k_cache, "k_cache");
  require_16b_rows(a.v_cache, "v_cache");
  if (pl.requests > 65535 || hkv * pl.row_tiles > 65535) {
    not_supported("at most 65535 requests and Hkv * row tiles",
                  detail::concat(pl.requests, " requests"));
  }
  if (pl.num_splits > 1 &&
      (a.workspace.data == nullptr || a.workspace.bytes < pl.workspace_bytes)) {
    throw Error(ErrorKind::kValue,
                detail::concat("hopattn.decode: expected a workspace of >= ", pl.workspace_bytes,
                               " bytes (decode_workspace_size), got ", a.workspace.bytes));
  }

  Params p{};
  p.q = q.data();
  p.out = a.out.data();
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.stride(i);
    p.out_stride[i] = a.out.stride(i);
  }
  if (a.lse.defined()) {
    p.lse = a.lse.data_as<float>();
    for (int i = 0; i < 3; ++i) p.lse_stride[i] = a.lse.stride(i);
  }
  const int64_t kb = dtype_size(a.k_cache.dtype());
  const int slot_dim = nhd ? 1 : 2, head_dim = nhd ? 2 : 1;
  p.k_cache = static_cast<const char*>(a.k_cache.data());
  p.v_cache = static_cast<const char*>(a.v_cache.data());
  p.k_page_stride = a.k_cache.stride(0) * kb;
  p.k_slot_stride = a.k_cache.stride(slot_dim) * kb;
  p.k_head_stride = a.k_cache.stride(head_dim) * kb;
  p.v_page_stride = a.v_cache.stride(0) * kb;
  p.v_slot_stride = a.v_cache.stride(slot_dim) * kb;
  p.v_head_stride = a.v_cache.stride(head_dim) * kb;
  p.page_size = static_cast<int>(a.k_cache.size(slot_dim));
  p.num_pages = static_cast<int>(std::min<int64_t>(a.k_cache.size(0), INT_MAX));
  p.page_div = FastDivisor::of(static_cast<uint32_t>(std::max(1, p.page_size)));

  const PageTable& pt = a.pages;
  if (pt.block_table.defined()) {
    p.block_table = pt.block_table.data_as<const int32_t>();
    p.bt_stride_row = pt.block_table.stride(0);
    p.bt_stride_page = pt.block_table.stride(1);
    p.max_pages = static_cast<int>(pt.block_table.size(1));
  } else {
    p.indptr = pt.indptr.data_as<const int32_t>();
    p.indptr_stride = pt.indptr.stride(0);
    p.indices = pt.indices.data_as<const int32_t>();
    p.indices_stride = pt.indices.stride(0);
    p.num_indices = pt.indices.size(0);
  }
  p.kv_lens = pt.kv_lens.data_as<const int32_t>();
  p.kv_lens_stride = pt.kv_lens.stride(0);
  p.beam_width = pl.beam_width;
  if (pl.beam_width > 1) {
    p.shared_kv_lens = a.shared_kv_lens.data_as<const int32_t>();
    p.shared_stride = a.shared_kv_lens.stride(0);
  }
  if (a.tree_mask.defined()) {
    p.tree_mask = a.tree_mask.data_as<const uint8_t>();
    for (int i = 0; i < 3; ++i) p.tree_stride[i] = a.tree_mask.stride(i);
  }
  if (a.sinks.defined()) {
    p.sinks = a.sinks.data_as<const float>();
    p.sinks_stride = a.sinks.stride(0);
  }
  p.k_scale = a.k_scale.value;
  p.v_scale = a.v_scale.value;
  if (a.k_scale.per_head.defined()) {
    p.k_scale_per_head = a.k_scale.per_head.data_as<const float>();
    p.k_scale_stride = a.k_scale.per_head.stride(0);
  }
  if (a.v_scale.per_head.defined()) {
    p.v_scale_per_head = a.v_scale.per_head.data_as<const float>();
    p.v_scale_stride = a.v_scale.per_head.stride(0);
  }
  p.softmax_scale = o.scale ? *o.scale : static_cast<float>(1.0 / std::sqrt(double(d)));
  p.softcap = o.softcap;
  p.mask.causal = o.causal;
  p.mask.window_left = o.window.left;
  p.mask.window_right = o.window.right;
  p.q_len = static_cast<int>(q.size(1));
  p.num_kv_heads = static_cast<int>(hkv);
  p.group = static_cast<int>(q.size(2) / hkv);
  p.rows_per_request = pl.rows_per_request;
  p.rows_per_cta = pl.rows_per_cta;
  p.row_tiles = pl.row_tiles;
  p.num_splits = pl.num_splits;
  set_divisors(p);
  if (pl.num_splits > 1) {
    char* ws = static_cast<char*>(a.workspace.data);
    p.semaphores = reinterpret_cast<uint32_t*>(ws);
    p.partial_o = reinterpret_cast<float*>(ws + pl.partial_o_offset);
    p.partial_lse = reinterpret_cast<float*>(ws + pl.partial_lse_offset);
  }
  if (pl.requests == 0) return;

  DeviceGuard guard(q.device().index, kWhere);
  p.status = device_status(q.device().index, kWhere);
  const dim3 grid(pl.num_splits, static_cast<unsigned>(hkv * pl.row_tiles), pl.requests);
  const bool bf16 = q.dtype() == DType::kBF16;
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  cudaError_t status = cudaErrorInvalidValue;
  if (pl.narrow) {  // plan_decode set it only where narrow_kernel_takes the call
    const cudaError_t narrow = d == 64 ? launch_narrow_for_head_dim<64>(p, bf16, grid, s)
                                       : launch_narrow_for_head_dim<128>(p, bf16, grid, s);
    check_cuda(narrow, "kernel launch");
    return;
  }
  if (pl.small) {  // plan_decode set it only where small_kernel_takes the call
    const cudaError_t small =
        d == 64 ? launch_small_for_head_dim<64>(p, bf16, format, pl.config, grid, s)
                : launch_small_for_head_dim<128>(p, bf16, format, pl.config, grid, s);
    check_cuda(small, "kernel launch");
    return;
  }
  const bool built = visit_head_dim(d, [&](auto head_dim) {
    status = launch_for_head_dim<decltype(head_dim)::value>(p, bf16, format, pl.config, grid, s);
  });
  if (!built) not_supported("head_dim " + built_head_dims_string(" or "), std::to_string(d));
  check_cuda(status, "kernel launch");
}

}  // namespace hopattn::kernels::decode
