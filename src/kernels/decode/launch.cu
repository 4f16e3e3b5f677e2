// Host side of the decode kernel: the launch plan (CTA shape, split count, workspace layout),
// TensorViews -> Params, and the launch. The kernels themselves are instantiated per head dim in
// hd64.cu / hd128.cu / hd256.cu, so a 2-core build compiles them in parallel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "hopattn/error.hpp"
#include "kernels/common/cuda_host.hpp"
#include "kernels/decode/kernel.cuh"
#include "kernels/decode/launch.hpp"
#include "kernels/decode/split_heuristic.hpp"

namespace hopattn::kernels::decode {

extern template cudaError_t launch_for_head_dim<64>(const Params&, bool, KvFormat, int, dim3,
                                                    cudaStream_t);
extern template cudaError_t launch_for_head_dim<128>(const Params&, bool, KvFormat, int, dim3,
                                                     cudaStream_t);
extern template cudaError_t launch_for_head_dim<256>(const Params&, bool, KvFormat, int, dim3,
                                                     cudaStream_t);

namespace {

constexpr const char* kWhere = "hopattn.decode";

void check_cuda(cudaError_t status, const char* what) { throw_if_cuda_error(status, kWhere, what); }

[[noreturn]] void not_supported(const std::string& what, const std::string& given) {
  throw Error(ErrorKind::kNotImplemented,
              detail::concat("hopattn.decode (GPU): expected ", what, ", got ", given));
}

template <int kHeadDim, int kKvBytes, int kCtas = 2>
int ctas_per_sm(int rows_per_cta) {
  const int smem = Traits<kHeadDim, kKvBytes, kCtas>::smem_bytes(rows_per_cta);
  // Register bound, 128 threads a CTA (ptxas -v: 128-135 registers at D = 64, 191-214 at
  // D = 128, 185-190 at D = 256; <= 168 in the three-CTA configuration).
  const int by_registers = kCtas >= 3 || kHeadDim <= 64 ? 3 : 2;
  int n = 1;
  while (n < by_registers && smem_fits(smem, n + 1)) ++n;
  return n;
}

int ctas_per_sm(int head_dim, int kv_bytes, int rows_per_cta, int config) {
  if (config == 3) return ctas_per_sm<128, 2, 3>(rows_per_cta);
  if (head_dim == 64)
    return kv_bytes == 2 ? ctas_per_sm<64, 2>(rows_per_cta) : ctas_per_sm<64, 1>(rows_per_cta);
  if (head_dim == 128)
    return kv_bytes == 2 ? ctas_per_sm<128, 2>(rows_per_cta) : ctas_per_sm<128, 1>(rows_per_cta);
  return kv_bytes == 2 ? ctas_per_sm<256, 2>(rows_per_cta) : ctas_per_sm<256, 1>(rows_per_cta);
}

// The instantiation's configuration: 3 where it exists and three CTAs of this row count fit an
// SM's shared memory (64-row CTAs do not), else 2.
int kernel_config(int head_dim, bool bf16, bool native16, int rows_per_cta) {
  const KvFormat format = native16 ? KvFormat::kNative16 : KvFormat::kE4M3;
  if (!has_three_cta_variant(head_dim, bf16, format)) return 2;
  return ctas_per_sm<128, 2, 3>(rows_per_cta) == 3 ? 3 : 2;
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

KvFormat kv_format(DType q, DType kv) {
  switch (kv) {
    case DType::kFP8E4M3:
      return KvFormat::kE4M3;
    case DType::kFP8E5M2:
      return KvFormat::kE5M2;
    case DType::kInt8:
      return KvFormat::kInt8;
    default:
      if (kv != q) not_supported("a 16-bit KV cache of q's dtype", dtype_name(kv));
      return KvFormat::kNative16;
  }
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

LaunchPlan plan(const DecodeArgs& a, const DecodeOptions& o, SmCount sms) {
  if (a.q.rank() != 4 || a.k_cache.rank() != 4) {
    throw Error(ErrorKind::kValue,
                detail::concat("hopattn.decode: expected q [B, q_len, Hq, D] and 4-d pages, got q ",
                               a.q.shape_string(), ", k_cache ", a.k_cache.shape_string()));
  }
  const bool nhd = a.pages.layout == KVLayout::kNHD;
  const int64_t batch = a.q.size(0), q_len = a.q.size(1), hq = a.q.size(2), d = a.q.size(3);
  const int64_t hkv = nhd ? a.k_cache.size(2) : a.k_cache.size(1);
  const int64_t page_size = nhd ? a.k_cache.size(1) : a.k_cache.size(2);
  if (hkv < 1 || hq % hkv != 0) {
    throw Error(ErrorKind::kValue,
                detail::concat("hopattn.decode: expected Hq a multiple of Hkv, got Hq = ", hq,
                               ", Hkv = ", hkv));
  }
  if (d != 64 && d != 128 && d != 256) not_supported("head_dim 64, 128 or 256", std::to_string(d));

  LaunchPlan pl;
  pl.beam_width = a.shared_kv_lens.defined() ? std::max(1, o.beam_width) : 1;
  if (pl.beam_width > kMaxBeams) {
    not_supported(detail::concat("beam_width <= ", kMaxBeams, " with shared_kv_lens"),
                  std::to_string(pl.beam_width));
  }
  pl.requests = static_cast<int>(batch / pl.beam_width);
  pl.rows_per_request = static_cast<int>(pl.beam_width * q_len * (hq / hkv));
  pl.rows_per_cta = rows_per_cta_for(static_cast<int>(d), pl.rows_per_request);
  pl.row_tiles = (pl.rows_per_request + pl.rows_per_cta - 1) / pl.rows_per_cta;
  pl.problems = int64_t(pl.requests) * hkv * pl.row_tiles;

  pl.config = kernel_config(static_cast<int>(d), a.q.dtype() == DType::kBF16,
                            dtype_size(a.k_cache.dtype()) == 2, pl.rows_per_cta);
  if (o.num_splits > 0) {
    pl.num_splits = std::min(o.num_splits, kMaxSplits);
  } else {
    const int64_t max_kv_len =
        (a.pages.block_table.defined() ? a.pages.block_table.size(1) : a.pages.indices.size(0)) *
        page_size;
    const int device = a.q.device().index;
    const int kv_bytes = dtype_size(a.k_cache.dtype());
    const int num_sms = sms == SmCount::kDevice ? sm_count(device, kWhere) : kHopperMaxSms;
    const int per_sm = ctas_per_sm(static_cast<int>(d), kv_bytes, pl.rows_per_cta, pl.config);
    // The workspace is sized for the largest Hopper part; the heuristic is not monotone in the
    // slot count, so a smaller part takes at most that many splits (never more than it has room
    // for).
    const int bound = choose_num_splits(pl.problems, max_kv_len, int64_t(kHopperMaxSms) * per_sm);
    pl.num_splits =
        sms == SmCount::kDevice
            ? std::min(bound, choose_num_splits(pl.problems, max_kv_len, int64_t(num_sms) * per_sm))
            : bound;
  }
  if (pl.num_splits > 1) {
    const size_t rows = size_t(pl.problems) * pl.num_splits * pl.rows_per_cta;
    pl.semaphore_bytes = align256(size_t(pl.problems) * sizeof(uint32_t));
    pl.partial_o_offset = pl.semaphore_bytes;
    pl.partial_lse_offset = pl.partial_o_offset + align256(rows * d * sizeof(float));
    pl.workspace_bytes = pl.partial_lse_offset + align256(rows * sizeof(float));
  }
  return pl;
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
  if (pl.num_splits > 1) {
    char* ws = static_cast<char*>(a.workspace.data);
    p.semaphores = reinterpret_cast<uint32_t*>(ws);
    p.partial_o = reinterpret_cast<float*>(ws + pl.partial_o_offset);
    p.partial_lse = reinterpret_cast<float*>(ws + pl.partial_lse_offset);
  }
  if (pl.requests == 0) return;

  DeviceGuard guard(q.device().index, kWhere);
  const dim3 grid(pl.num_splits, static_cast<unsigned>(hkv * pl.row_tiles), pl.requests);
  const bool bf16 = q.dtype() == DType::kBF16;
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  cudaError_t status = cudaErrorInvalidValue;
  switch (d) {
    case 64:
      status = launch_for_head_dim<64>(p, bf16, format, pl.config, grid, s);
      break;
    case 128:
      status = launch_for_head_dim<128>(p, bf16, format, pl.config, grid, s);
      break;
    case 256:
      status = launch_for_head_dim<256>(p, bf16, format, pl.config, grid, s);
      break;
    default:
      not_supported("head_dim 64, 128 or 256", std::to_string(d));
  }
  check_cuda(status, "kernel launch");
}

}  // namespace hopattn::kernels::decode
