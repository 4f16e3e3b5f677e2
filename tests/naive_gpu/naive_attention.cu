// Host side of the naive fp32 reference: TensorViews -> NaiveParams, grid, launch, error check.
#include <cuda_runtime.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

#include "hopattn/error.hpp"
#include "kernels/common/cuda_host.hpp"
#include "naive_gpu/naive_attention.cuh"
#include "naive_gpu/naive_attention.hpp"

namespace hopattn::naive {
namespace {

constexpr const char* kWhere = "hopattn.naive";

void check_cuda(cudaError_t status, const char* what) {
  kernels::throw_if_cuda_error(status, kWhere, what);
}

using NamedTensor = std::pair<TensorView, const char*>;

// Every defined tensor must be a CUDA tensor on `device`: the kernel dereferences them all.
void require_on_device(const TensorView& t, const char* name, const Device& device) {
  if (!t.defined()) return;
  check(t.device() == device, ErrorKind::kType, detail::concat("hopattn.naive: ", name),
        detail::concat("a tensor on ", device), detail::concat("a tensor on ", t.device()));
}

void require_dtype(const TensorView& t, const char* name, DType dtype) {
  if (!t.defined()) return;
  check(t.dtype() == dtype, ErrorKind::kType, detail::concat("hopattn.naive: ", name),
        dtype_name(dtype), dtype_name(t.dtype()));
}

DeviceIndex device_index(const TensorView& t, const char* name) {
  require_dtype(t, name, DType::kInt32);
  if (!t.defined()) return {};
  return {t.data_as<const int32_t>(), t.stride(0)};
}

// Rows of a q/out ([B, S, H, D] or [total, H, D]) or lse ([B, S, H] or [total, H]) tensor.
RowLayout row_layout(const TensorView& t, bool has_feature_dim, const DeviceIndex& cu_seqlens) {
  const int batch_rank = has_feature_dim ? 4 : 3;
  RowLayout r;
  if (t.rank() == batch_rank) {
    r.batch_stride = t.stride(0);
    r.token_stride = t.stride(1);
    r.head_stride = t.stride(2);
  } else {
    r.cu_seqlens = cu_seqlens;
    r.token_stride = t.stride(0);
    r.head_stride = t.stride(1);
  }
  return r;
}

KvLayout kv_layout(const TensorView& t, const PageTable& pages, const DeviceIndex& cu_seqlens_k) {
  KvLayout kv;
  for (int d = 0; d < t.rank() && d < 4; ++d) kv.stride[d] = t.stride(d);
  if (pages.defined()) {
    kv.mode = KvLayout::Mode::kPaged;
    kv.hnd = pages.layout == KVLayout::kHND;
    kv.page_size = static_cast<int32_t>(kv.hnd ? t.size(2) : t.size(1));
    if (pages.block_table.defined()) {
      require_dtype(pages.block_table, "block_table", DType::kInt32);
      kv.block_table = pages.block_table.data_as<const int32_t>();
      kv.block_table_stride[0] = pages.block_table.stride(0);
      kv.block_table_stride[1] = pages.block_table.stride(1);
    } else {
      kv.indptr = device_index(pages.indptr, "page indptr");
      kv.indices = device_index(pages.indices, "page indices");
    }
  } else if (t.rank() == 3) {
    kv.mode = KvLayout::Mode::kVarlen;
    kv.cu_seqlens = cu_seqlens_k;
  } else {
    kv.mode = KvLayout::Mode::kDense;
  }
  return kv;
}

bool is_kv_dtype(DType t) {
  return t == DType::kBF16 || t == DType::kFP16 || t == DType::kFP8E4M3 || t == DType::kFP8E5M2 ||
         t == DType::kInt8;
}

void require_io_dtype(const TensorView& t, const char* name) {
  const bool ok =
      t.dtype() == DType::kBF16 || t.dtype() == DType::kFP16 || t.dtype() == DType::kFP32;
  check(ok, ErrorKind::kType, detail::concat("hopattn.naive: ", name), "bf16, fp16 or fp32",
        dtype_name(t.dtype()));
}

template <typename KvT>
void launch_typed(const NaiveParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    check_cuda(
        cudaFuncSetAttribute(naive_attention_kernel<KvT>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "cudaFuncSetAttribute(max dynamic shared memory)");
  }
  naive_attention_kernel<KvT><<<grid, kThreads, smem, stream>>>(p);
  check_cuda(cudaGetLastError(), "naive_attention_kernel launch");
}

// Grid: x = query rows (up to the longest request), y = q heads, z = requests.
void launch(const NaiveParams& p, DType kv_dtype, int64_t rows, int64_t batch, Device device,
            Stream stream) {
  check(batch <= 65535, ErrorKind::kValue, "hopattn.naive: batch", "<= 65535", batch);
  check(p.num_q_heads <= 65535, ErrorKind::kValue, "hopattn.naive: q heads", "<= 65535",
        p.num_q_heads);
  check(rows <= 0x7fffffff, ErrorKind::kValue, "hopattn.naive: query rows", "< 2^31", rows);
  if (rows <= 0 || batch <= 0 || p.num_q_heads <= 0) return;  // nothing to compute
  const size_t smem = kKeysPerChunk * sizeof(int64_t) +
                      (p.head_dim_qk + p.head_dim_v + kKeysPerChunk + kWarps) * sizeof(float);
  kernels::DeviceGuard guard(device.index, kWhere);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(p.num_q_heads),
                  static_cast<unsigned>(batch));
  auto* s = reinterpret_cast<cudaStream_t>(stream);
  switch (kv_dtype) {
    case DType::kBF16:
      return launch_typed<__nv_bfloat16>(p, grid, smem, s);
    case DType::kFP16:
      return launch_typed<__half>(p, grid, smem, s);
    case DType::kFP8E4M3:
      return launch_typed<__nv_fp8_e4m3>(p, grid, smem, s);
    case DType::kFP8E5M2:
      return launch_typed<__nv_fp8_e5m2>(p, grid, smem, s);
    case DType::kInt8:
      return launch_typed<int8_t>(p, grid, smem, s);
    default:
      throw Error(ErrorKind::kType,
                  detail::concat("hopattn.naive: KV dtype: expected bf16, fp16, fp8_e4m3, "
                                 "fp8_e5m2 or int8, got ",
                                 dtype_name(kv_dtype)));
  }
}

// The parts fwd and decode share: q/out/lse, heads, K/V, masks, scale, sinks.
NaiveParams common_params(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const TensorView& lse, const TensorView& sinks,
                          const PageTable& pages, const DeviceIndex& cu_q,
                          const DeviceIndex& cu_k) {
  require_io_dtype(q, "q");
  require_io_dtype(out, "out");
  require_dtype(lse, "lse", DType::kFP32);
  require_dtype(sinks, "sinks", DType::kFP32);
  check(k.dtype() == v.dtype() && is_kv_dtype(k.dtype()), ErrorKind::kType,
        "hopattn.naive: k/v dtype", "one of bf16, fp16, fp8_e4m3, fp8_e5m2, int8 for both",
        detail::concat(dtype_name(k.dtype()), "/", dtype_name(v.dtype())));
  NaiveParams p;
  p.q = q.data();
  p.q_dtype = q.dtype();
  p.q_rows = row_layout(q, true, cu_q);
  p.q_dim_stride = q.stride(-1);
  p.out = out.data();
  p.out_dtype = out.dtype();
  p.out_rows = row_layout(out, true, cu_q);
  p.out_dim_stride = out.stride(-1);
  if (lse.defined()) {
    p.lse = lse.data_as<float>();
    p.lse_rows = row_layout(lse, false, cu_q);
  }
  p.num_q_heads = static_cast<int>(q.size(-2));
  p.head_dim_qk = static_cast<int>(q.size(-1));
  p.head_dim_v = static_cast<int>(v.size(-1));
  p.k = k.data();
  p.v = v.data();
  p.k_layout = kv_layout(k, pages, cu_k);
  p.v_layout = kv_layout(v, pages, cu_k);
  const int64_t kv_heads =
      pages.defined() && pages.layout == KVLayout::kHND ? k.size(1) : k.size(-2);
  check(kv_heads > 0 && p.num_q_heads % kv_heads == 0, ErrorKind::kValue, "hopattn.naive: q heads",
        detail::concat("a multiple of the ", kv_heads, " KV heads"), p.num_q_heads);
  p.group_size = static_cast<int>(p.num_q_heads / kv_heads);
  p.kv_lens = device_index(pages.kv_lens, "kv_lens");
  if (sinks.defined()) {
    p.sinks = sinks.data_as<const float>();
    p.sinks_stride = sinks.stride(0);
  }
  return p;
}

void set_window(NaiveParams& p, bool causal, Window window, float softcap,
                const std::optional<float>& scale) {
  p.causal = causal;
  p.window_left = window.left;
  p.window_right = window.right;
  p.softcap = softcap;
  p.scale = scale ? *scale : static_cast<float>(1.0 / std::sqrt(double(p.head_dim_qk)));
}

KvScale kv_scale(const KVScale& s, const char* name) {
  KvScale r;
  r.value = s.value;
  if (s.per_head.defined()) {
    require_dtype(s.per_head, name, DType::kFP32);
    r.per_head = s.per_head.data_as<const float>();
    r.stride = s.per_head.stride(0);
  }
  return r;
}

}  // namespace

void naive_attention_fwd(const FwdArgs& args, const AttentionOptions& opts, Stream stream) {
  const Device device = args.q.device();
  check(device.is_cuda(), ErrorKind::kType, "hopattn.naive_attention_fwd: q", "a CUDA tensor",
        "a CPU tensor");
  for (const auto& [t, name] :
       std::initializer_list<NamedTensor>{{args.k, "k"},
                                          {args.v, "v"},
                                          {args.out, "out"},
                                          {args.lse, "lse"},
                                          {args.cu_seqlens_q, "cu_seqlens_q"},
                                          {args.cu_seqlens_k, "cu_seqlens_k"},
                                          {args.sinks, "sinks"},
                                          {args.pages.block_table, "block_table"},
                                          {args.pages.indptr, "page indptr"},
                                          {args.pages.indices, "page indices"},
                                          {args.pages.kv_lens, "kv_lens"}}) {
    require_on_device(t, name, device);
  }
  const bool q_varlen = args.q.rank() == 3;
  const DeviceIndex cu_q =
      q_varlen ? device_index(args.cu_seqlens_q, "cu_seqlens_q") : DeviceIndex{};
  const DeviceIndex cu_k = device_index(args.cu_seqlens_k, "cu_seqlens_k");
  check(!q_varlen || cu_q.defined(), ErrorKind::kValue, "hopattn.naive_attention_fwd",
        "cu_seqlens_q with a varlen q [total_q, Hq, D]", "none");
  NaiveParams p =
      common_params(args.q, args.k, args.v, args.out, args.lse, args.sinks, args.pages, cu_q, cu_k);
  check(p.k_layout.mode != KvLayout::Mode::kVarlen || cu_k.defined(), ErrorKind::kValue,
        "hopattn.naive_attention_fwd", "cu_seqlens_k with varlen k/v [total_kv, Hkv, D]", "none");
  set_window(p, opts.causal, opts.window, opts.softcap, opts.scale);
  if (p.k_layout.mode == KvLayout::Mode::kDense) p.dense_kv_len = static_cast<int>(args.k.size(1));

  int64_t batch = 0;
  int64_t rows = 0;
  if (q_varlen) {
    batch = args.cu_seqlens_q.size(0) - 1;
    rows = args.max_seqlen_q > 0 ? args.max_seqlen_q : args.q.size(0);
  } else {
    batch = args.q.size(0);
    rows = args.q.size(1);
    p.dense_q_len = static_cast<int>(rows);
  }
  launch(p, args.k.dtype(), rows, batch, device, stream);
}

void naive_decode(const DecodeArgs& args, const DecodeOptions& opts, Stream stream) {
  const Device device = args.q.device();
  check(device.is_cuda(), ErrorKind::kType, "hopattn.naive_decode: q", "a CUDA tensor",
        "a CPU tensor");
  for (const auto& [t, name] :
       std::initializer_list<NamedTensor>{{args.k_cache, "k_cache"},
                                          {args.v_cache, "v_cache"},
                                          {args.out, "out"},
                                          {args.lse, "lse"},
                                          {args.sinks, "sinks"},
                                          {args.tree_mask, "tree_mask"},
                                          {args.shared_kv_lens, "shared_kv_lens"},
                                          {args.k_scale.per_head, "k_scale"},
                                          {args.v_scale.per_head, "v_scale"},
                                          {args.pages.block_table, "block_table"},
                                          {args.pages.indptr, "page indptr"},
                                          {args.pages.indices, "page indices"},
                                          {args.pages.kv_lens, "kv_lens"}}) {
    require_on_device(t, name, device);
  }
  check(args.q.rank() == 4, ErrorKind::kValue, "hopattn.naive_decode: q", "[B, q_len, Hq, D]",
        args.q.shape_string());
  check(args.pages.defined() && args.pages.kv_lens.defined(), ErrorKind::kValue,
        "hopattn.naive_decode: pages", "a block table or CSR page list, and kv_lens", "none");
  check(opts.beam_width >= 1 && args.q.size(0) % opts.beam_width == 0, ErrorKind::kValue,
        "hopattn.naive_decode: beam_width", detail::concat("a divisor of B = ", args.q.size(0)),
        opts.beam_width);
  NaiveParams p = common_params(args.q, args.k_cache, args.v_cache, args.out, args.lse, args.sinks,
                                args.pages, {}, {});
  set_window(p, opts.causal, opts.window, opts.softcap, opts.scale);
  p.dense_q_len = static_cast<int>(args.q.size(1));
  p.k_scale = kv_scale(args.k_scale, "k_scale");
  p.v_scale = kv_scale(args.v_scale, "v_scale");
  if (args.tree_mask.defined()) {
    require_dtype(args.tree_mask, "tree_mask", DType::kBool);
    p.tree_mask = args.tree_mask.data_as<const uint8_t>();
    for (int d = 0; d < 3; ++d) p.tree_mask_stride[d] = args.tree_mask.stride(d);
  }
  p.beam_width = opts.beam_width;
  p.shared_kv_lens = device_index(args.shared_kv_lens, "shared_kv_lens");
  launch(p, args.k_cache.dtype(), args.q.size(1), args.q.size(0), device, stream);
}

}  // namespace hopattn::naive
