// Device side of the naive fp32 reference (naive_attention.hpp): the parameter block and the
// kernel. One thread block computes one (request b, query row i, q head h):
//   1. the q row goes to shared memory as float;
//   2. pass 1: each warp takes keys in turn, lanes split the dot product over the head dim,
//      and the block reduces the running maxima to the row maximum m (sink included);
//   3. pass 2: keys in chunks of kKeysPerChunk; warps write p_j = exp(s_j - m) to shared memory,
//      then each thread accumulates its own output features over the chunk;
//   4. out = acc / l, lse = m + log(l), with l the sum of p_j plus exp(sink - m).
// Logits are computed twice (once per pass): simple and exact, and the row never needs
// rescaling. Masked keys are skipped, so nothing outside the visible keys is ever read.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "hopattn/dtype.hpp"

namespace hopattn::naive {

inline constexpr int kThreads = 128;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kKeysPerChunk = 64;

// A strided int32 vector in device memory (cu_seqlens, kv_lens, ...); null = absent.
struct DeviceIndex {
  const int32_t* ptr = nullptr;
  int64_t stride = 1;
  __device__ int64_t operator[](int64_t i) const { return ptr[i * stride]; }
  __host__ __device__ bool defined() const { return ptr != nullptr; }
};

// Rows of q, out or lse: dense [B, S, H, ...] or varlen [total, H, ...] + cu_seqlens.
struct RowLayout {
  DeviceIndex cu_seqlens;  // defined: varlen
  int64_t batch_stride = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  __device__ int64_t offset(int64_t b, int64_t i, int64_t h) const {
    const int64_t token = cu_seqlens.defined() ? cu_seqlens[b] + i : i;
    const int64_t batch = cu_seqlens.defined() ? 0 : b * batch_stride;
    return batch + token * token_stride + h * head_stride;
  }
};

// Where token t of a request sits in a K or V tensor. `stride` is in the tensor's own dim order:
// dense [B, S, H, D]; varlen [total, H, D]; paged NHD [P, page, H, D], HND [P, H, page, D].
struct KvLayout {
  enum class Mode : int { kDense, kVarlen, kPaged };
  Mode mode = Mode::kDense;
  bool hnd = false;
  int64_t stride[4] = {0, 0, 0, 0};
  int32_t page_size = 1;
  DeviceIndex cu_seqlens;  // varlen
  const int32_t* block_table = nullptr;
  int64_t block_table_stride[2] = {0, 0};
  DeviceIndex indptr, indices;  // CSR page list when there is no block table

  // Offset of (token t, head h, feature 0). Paged: `page_row` is the page-table row to read
  // (a beam's own row, or its request's first beam for the shared prefix).
  __device__ int64_t token_offset(int64_t b, int64_t page_row, int64_t t, int64_t h) const {
    switch (mode) {
      case Mode::kDense:
        return b * stride[0] + t * stride[1] + h * stride[2];
      case Mode::kVarlen:
        return (cu_seqlens[b] + t) * stride[0] + h * stride[1];
      case Mode::kPaged:
      default: {
        // Token indices and page sizes fit in int32 (lengths are int32): 32-bit division is
        // several times cheaper than 64-bit; the address math below stays in int64.
        const int32_t slot = static_cast<int32_t>(t) / page_size;
        const int64_t page =
            block_table != nullptr
                ? block_table[page_row * block_table_stride[0] + slot * block_table_stride[1]]
                : indices[indptr[page_row] + slot];
        const int32_t within = static_cast<int32_t>(t) % page_size;
        return hnd ? page * stride[0] + h * stride[1] + within * stride[2]
                   : page * stride[0] + within * stride[1] + h * stride[2];
      }
    }
  }
  __device__ int64_t dim_stride() const { return mode == Mode::kVarlen ? stride[2] : stride[3]; }
};

// Dequantization scale of K or V: per tensor, or per KV head when `per_head` is set.
struct KvScale {
  float value = 1.f;
  const float* per_head = nullptr;
  int64_t stride = 1;
  __device__ float at(int64_t kv_head) const {
    return per_head != nullptr ? per_head[kv_head * stride] : value;
  }
};

struct NaiveParams {
  const void* q = nullptr;
  DType q_dtype = DType::kBF16;
  RowLayout q_rows;
  int64_t q_dim_stride = 1;
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  RowLayout out_rows;
  int64_t out_dim_stride = 1;
  float* lse = nullptr;  // optional
  RowLayout lse_rows;

  int num_q_heads = 0;
  int group_size = 1;  // q heads per KV head
  int head_dim_qk = 0;
  int head_dim_v = 0;

  int dense_q_len = 0;   // used when q_rows is dense
  int dense_kv_len = 0;  // used when K/V are dense
  DeviceIndex kv_lens;   // paged: tokens per page-table row

  const void* k = nullptr;
  const void* v = nullptr;
  KvLayout k_layout, v_layout;
  KvScale k_scale, v_scale;

  float scale = 1.f;  // softmax scale on q.k
  float softcap = 0.f;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  const float* sinks = nullptr;
  int64_t sinks_stride = 1;

  // Decode only.
  const uint8_t* tree_mask = nullptr;  // bool [B, q_len, q_len]
  int64_t tree_mask_stride[3] = {0, 0, 0};
  int beam_width = 1;
  DeviceIndex shared_kv_lens;  // [B / beam_width]
};

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_float(__nv_fp8_e5m2 x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_float(int8_t x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_float(float x) { return x; }

// q and out are read/written once per feature, so a run-time dtype switch costs nothing there.
__device__ __forceinline__ float load_q(const void* base, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::kBF16:
      return to_float(static_cast<const __nv_bfloat16*>(base)[offset]);
    case DType::kFP16:
      return to_float(static_cast<const __half*>(base)[offset]);
    default:
      return static_cast<const float*>(base)[offset];
  }
}

__device__ __forceinline__ void store_out(void* base, DType dtype, int64_t offset, float x) {
  switch (dtype) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(base)[offset] = __float2bfloat16_rn(x);
      break;
    case DType::kFP16:
      static_cast<__half*>(base)[offset] = __float2half_rn(x);
      break;
    default:
      static_cast<float*>(base)[offset] = x;
      break;
  }
}

__device__ __forceinline__ int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Block-wide max or sum of one value per warp (held by every lane). `scratch` holds kWarps
// floats; the trailing barrier lets the caller reuse it at once.
template <bool kMax>
__device__ float block_reduce(float x, float* scratch) {
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = x;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = kMax ? fmaxf(r, scratch[w]) : r + scratch[w];
  __syncthreads();
  return r;
}

// The minimum of 6 blocks per SM caps registers near 80: enough for no spills (ptxas 13.0 spilled
// a few bytes at both the bare kThreads bound and a cap of 64), and occupancy stays high for a
// kernel that mostly waits on memory.
template <typename KvT>
__global__ void __launch_bounds__(kThreads, 6) naive_attention_kernel(const NaiveParams p) {
  extern __shared__ int64_t smem[];
  int64_t* v_offsets = smem;                                      // [kKeysPerChunk]
  float* q_row = reinterpret_cast<float*>(smem + kKeysPerChunk);  // [head_dim_qk]
  float* acc = q_row + p.head_dim_qk;                             // [head_dim_v]
  float* probs = acc + p.head_dim_v;                              // [kKeysPerChunk]
  float* scratch = probs + kKeysPerChunk;                         // [kWarps]

  const int64_t i = blockIdx.x;
  const int64_t h = blockIdx.y;
  const int64_t b = blockIdx.z;
  const DeviceIndex& cu_q = p.q_rows.cu_seqlens;
  const int64_t q_len = cu_q.defined() ? cu_q[b + 1] - cu_q[b] : p.dense_q_len;
  if (i >= q_len) return;  // the grid covers the longest request; uniform over the block

  int64_t kv_len = p.dense_kv_len;
  if (p.k_layout.mode == KvLayout::Mode::kVarlen) {
    kv_len = p.k_layout.cu_seqlens[b + 1] - p.k_layout.cu_seqlens[b];
  } else if (p.k_layout.mode == KvLayout::Mode::kPaged) {
    kv_len = p.kv_lens[b];
  }
  const int64_t kv_head = h / p.group_size;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  // Beams: the first shared_kv_lens tokens are read through the request's first beam's pages.
  const int64_t first_beam = (b / p.beam_width) * p.beam_width;
  const int64_t shared_len = p.shared_kv_lens.defined() ? p.shared_kv_lens[b / p.beam_width] : 0;

  // Visible keys [lo, hi): causal and window bounds around the bottom-right aligned diagonal.
  const int64_t diag = i + kv_len - q_len;
  int64_t lo = 0;
  int64_t hi = kv_len;
  // A tree mask replaces the causal rule inside the draft (the last q_len keys): the prefix is
  // always visible, draft key t iff tree_mask[b][i][t]. The window applies on top.
  if (p.causal && p.tree_mask == nullptr) hi = min_i64(hi, diag + 1);
  if (p.window_left >= 0) lo = max_i64(lo, diag - p.window_left);
  if (p.window_right >= 0) hi = min_i64(hi, diag + p.window_right + 1);
  const int64_t draft_start = kv_len - q_len;
  auto visible = [&](int64_t j) {
    if (p.tree_mask == nullptr || j < draft_start) return true;
    return p.tree_mask[b * p.tree_mask_stride[0] + i * p.tree_mask_stride[1] +
                       (j - draft_start) * p.tree_mask_stride[2]] != 0;
  };

  const int64_t q_base = p.q_rows.offset(b, i, h);
  for (int d = threadIdx.x; d < p.head_dim_qk; d += kThreads) {
    q_row[d] = load_q(p.q, p.q_dtype, q_base + d * p.q_dim_stride);
  }
  for (int d = threadIdx.x; d < p.head_dim_v; d += kThreads) acc[d] = 0.f;
  __syncthreads();

  const float score_scale = p.scale * p.k_scale.at(kv_head);
  const KvT* k = static_cast<const KvT*>(p.k);
  const KvT* v = static_cast<const KvT*>(p.v);
  const int64_t k_dim_stride = p.k_layout.dim_stride();
  const int64_t v_dim_stride = p.v_layout.dim_stride();
  auto page_row = [&](int64_t j) { return j < shared_len ? first_beam : b; };
  // Logit of key j; a warp-collective call (every lane gets the value).
  auto logit = [&](int64_t j) {
    const int64_t base = p.k_layout.token_offset(b, page_row(j), j, kv_head);
    float part = 0.f;
    for (int d = lane; d < p.head_dim_qk; d += 32) {
      part += q_row[d] * to_float(k[base + d * k_dim_stride]);
    }
    float s = warp_sum(part) * score_scale;
    if (p.softcap > 0.f) s = p.softcap * tanhf(s / p.softcap);
    return s;
  };

  // Pass 1: the row maximum.
  float m = -INFINITY;
  for (int64_t j = lo + warp; j < hi; j += kWarps) {
    if (visible(j)) m = fmaxf(m, logit(j));
  }
  m = block_reduce<true>(m, scratch);
  const float sink = p.sinks != nullptr ? p.sinks[h * p.sinks_stride] : -INFINITY;
  m = fmaxf(m, sink);

  // Pass 2: probabilities chunk by chunk, then each thread accumulates its output features.
  float l = 0.f;  // per warp (lane 0's copy is the one summed)
  if (m != -INFINITY) {
    for (int64_t c0 = lo; c0 < hi; c0 += kKeysPerChunk) {
      const int n = static_cast<int>(min_i64(kKeysPerChunk, hi - c0));
      for (int jj = warp; jj < n; jj += kWarps) {
        const int64_t j = c0 + jj;
        const float pj = visible(j) ? expf(logit(j) - m) : 0.f;
        if (lane == 0) {
          probs[jj] = pj;
          v_offsets[jj] = p.v_layout.token_offset(b, page_row(j), j, kv_head);
          l += pj;
        }
      }
      __syncthreads();
      for (int d = threadIdx.x; d < p.head_dim_v; d += kThreads) {
        float a = acc[d];
        for (int jj = 0; jj < n; ++jj) {
          const float pj = probs[jj];
          if (pj == 0.f) continue;  // masked (or underflowed): never touch its V row
          a += pj * to_float(v[v_offsets[jj] + d * v_dim_stride]);
        }
        acc[d] = a;
      }
      __syncthreads();
    }
  }
  l = block_reduce<false>(l, scratch);  // lane 0 of each warp holds the warp's sum
  if (sink != -INFINITY && m != -INFINITY) l += expf(sink - m);

  // No visible key and no sink: out = 0, lse = -inf (never NaN).
  const bool empty = m == -INFINITY;
  const float out_scale = empty ? 0.f : p.v_scale.at(kv_head) / l;
  const int64_t out_base = p.out_rows.offset(b, i, h);
  for (int d = threadIdx.x; d < p.head_dim_v; d += kThreads) {
    store_out(p.out, p.out_dtype, out_base + d * p.out_dim_stride, acc[d] * out_scale);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) {
    p.lse[p.lse_rows.offset(b, i, h)] = empty ? -INFINITY : m + logf(l);
  }
}

}  // namespace hopattn::naive
