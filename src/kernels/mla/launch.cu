// Host side of the MLA kernel: TensorViews -> MlaParams, the split plan (src/plan/mla_plan.hpp),
// the launch, and the merge of split partial states through the merge family's kernel.
#include <cuda_runtime.h>

#include <cmath>

#include "hopattn/error.hpp"
#include "kernels/common/cuda_host.hpp"
#include "kernels/common/device_status_host.hpp"
#include "kernels/common/math_constants.hpp"
#include "kernels/merge/launch.hpp"
#include "kernels/mla/configs.cuh"
#include "kernels/mla/launch.hpp"
#include "ptx/tensor_map.hpp"

namespace hopattn::kernels::mla {

namespace {

constexpr const char* kWhere = "hopattn.mla";

[[noreturn]] void not_supported(const std::string& what, const std::string& given) {
  throw Error(ErrorKind::kNotImplemented,
              detail::concat("hopattn.mla (GPU): expected ", what, ", got ", given));
}

// Element strides of the request-major page list: the block table's, or CSR's.
void set_pages(MlaParams& p, const PageTable& pt) {
  if (pt.block_table.defined()) {
    p.block_table = pt.block_table.data_as<const int32_t>();
    p.block_table_stride = pt.block_table.stride(0);
    p.page_col_stride = pt.block_table.stride(1);
    p.max_pages = static_cast<int>(pt.block_table.size(1));
  } else {
    p.page_indptr = pt.indptr.data_as<const int32_t>();
    p.page_indptr_stride = pt.indptr.stride(0);
    p.page_indices = pt.indices.data_as<const int32_t>();
    p.page_col_stride = pt.indices.stride(0);
    p.num_indices = pt.indices.size(0);
  }
  p.kv_lens = pt.kv_lens.data_as<const int32_t>();
  p.kv_lens_stride = pt.kv_lens.stride(0);
}

// 3-D tiled map of a [pages, page_size, D] pool view (arbitrary page and slot strides), boxes of
// 64 columns x block_keys slots x 1 page, 128B-swizzled.
CUtensorMap pool_map(const TensorView& t, int block_keys) {
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  ptx::TensorMapSpec s = ptx::tensor_map_spec_16bit(t.data(), t.dtype(), 3);
  s.dims = {u(t.size(2)), u(t.size(1)), u(t.size(0))};
  s.strides = {0, u(t.stride(1)) * 2, u(t.stride(0)) * 2};
  s.box = {64, static_cast<uint32_t>(block_keys), 1};
  return ptx::encode_tensor_map(s);
}

}  // namespace

void launch(const MlaArgs& a, const MlaOptions& o, Stream stream) {
  const int device = a.q_nope.device().index;
  const plan::mla::Plan pl =
      plan::mla::make_plan(plan::mla::shape_of(a, o), sm_count(device, kWhere));
  const int64_t batch = a.cu_seqlens_q.size(0) - 1;
  if (batch > 65535) {
    not_supported("at most 65535 requests", std::to_string(batch));
  }
  // The online softmax keeps the running max of the raw logits, the right reference only for a
  // positive scale (fwd/softmax.cuh); the CPU reference computes any scale.
  if (o.scale && *o.scale < 0.f) {
    not_supported("a scale >= 0 (the CPU reference takes any)", std::to_string(*o.scale));
  }
  if (pl.num_splits > 1 &&
      (a.workspace.data == nullptr || a.workspace.bytes < pl.workspace_bytes)) {
    throw Error(ErrorKind::kValue,
                detail::concat(kWhere, ": expected a workspace of >= ", pl.workspace_bytes,
                               " bytes (mla_workspace_size), got ", a.workspace.bytes));
  }
  if (batch == 0 || a.q_nope.size(0) == 0) return;

  MlaParams p{};
  p.q_nope = a.q_nope.data();
  p.q_pe = a.q_pe.data();
  for (int i = 0; i < 2; ++i) {
    p.q_nope_stride[i] = a.q_nope.stride(i);
    p.q_pe_stride[i] = a.q_pe.stride(i);
    p.ckv_stride[i] = a.ckv.stride(i);
    p.kpe_stride[i] = a.kpe.stride(i);
    p.out_stride[i] = a.out.stride(i);
    p.lse_stride[i] = a.lse.stride(i);
  }
  p.ckv = a.ckv.data();
  p.kpe = a.kpe.data();
  p.num_pages = static_cast<int>(a.ckv.size(0));
  p.page_size = static_cast<int>(a.ckv.size(1));
  p.page_div = FastDivisor::of(static_cast<uint32_t>(std::max(1, p.page_size)));
  set_pages(p, a.pages);
  p.cu_seqlens_q = a.cu_seqlens_q.data_as<const int32_t>();
  p.cu_seqlens_stride = a.cu_seqlens_q.stride(0);
  p.heads = static_cast<int>(a.q_nope.size(1));
  p.head_div = FastDivisor::of(static_cast<uint32_t>(p.heads));
  p.causal = o.causal;
  // real K and V = stored * kv_scale: the factor folds into the logits' scale and the output's.
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(double(kQkDim));
  p.scale_log2 = static_cast<float>(scale * double(a.kv_scale) * kLog2eDouble);
  p.v_scale = a.kv_scale;
  p.out = a.out.data();
  p.lse = a.lse.data_as<float>();
  p.num_splits = pl.num_splits;
  p.total_q = a.q_nope.size(0);
  if (pl.num_splits > 1) {
    char* ws = static_cast<char*>(a.workspace.data);
    p.partial_o = reinterpret_cast<float*>(ws + pl.partial_o_offset);
    p.partial_lse = reinterpret_cast<float*>(ws + pl.partial_lse_offset);
  }

  DeviceGuard guard(device, kWhere);
  p.status = device_status(device, kWhere);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(pl.row_tiles), static_cast<unsigned>(pl.num_splits),
                  static_cast<unsigned>(batch));
  cudaError_t status = cudaErrorInvalidValue;
  // Pages that hold whole KV blocks come by TMA (16-bit caches; fp8 is widened in registers).
  const auto launch_with = [&](auto traits) {
    using Traits = decltype(traits);
    p.tma = !Traits::kFp8Cache && p.page_size % Traits::kBlockKeys == 0 && p.num_pages > 0;
    if (p.tma) {
      p.tm_ckv = pool_map(a.ckv, Traits::kBlockKeys);
      p.tm_kpe = pool_map(a.kpe, Traits::kBlockKeys);
    }
    status = launch_kernel<Traits>(p, grid, s);
  };
  const bool built = visit_config(a.q_nope.dtype(), a.ckv.dtype(), [&](auto config) {
    using Traits = typename decltype(config)::type;
    if constexpr (!Traits::kFp8Cache) {
      if (pl.seesaw) return launch_with(SeesawOf<Traits>{});
    }
    if constexpr (Traits::kFp8Cache) {
      if (pl.narrow && pl.narrow_cols > plan::mla::kNarrowRows) {
        return launch_with(NarrowOf<Traits, plan::mla::kNarrowRowsFp8>{});
      }
    }
    if (pl.narrow) return launch_with(NarrowOf<Traits>{});
    launch_with(Traits{});
  });
  if (!built) {
    not_supported(
        detail::concat("(q_nope, ckv) dtypes among ", built_configs_string()),
        detail::concat("(", dtype_name(a.q_nope.dtype()), ", ", dtype_name(a.ckv.dtype()), ")"));
  }
  throw_if_cuda_error(status, kWhere, "kernel launch");
  if (pl.num_splits == 1) return;

  // The partial states [splits, T, H, 512] / [splits, T, H] seen as merge_states_n's
  // [T, n, H, D] / [T, n, H] by their strides.
  const int64_t t = p.total_q, h = p.heads, n = pl.num_splits;
  const int64_t o_shape[4] = {t, n, h, kLatentDim};
  const int64_t o_strides[4] = {h * kLatentDim, t * h * kLatentDim, kLatentDim, 1};
  const int64_t l_shape[3] = {t, n, h};
  const int64_t l_strides[3] = {h, t * h, 1};
  MergeNArgs m;
  m.o = TensorView(p.partial_o, DType::kFP32, 4, o_shape, o_strides, a.q_nope.device());
  m.lse = TensorView(p.partial_lse, DType::kFP32, 3, l_shape, l_strides, a.q_nope.device());
  m.out = a.out;
  m.lse_out = a.lse;
  merge::launch_merge_states_n(m, stream);
}

}  // namespace hopattn::kernels::mla
