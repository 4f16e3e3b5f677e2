// Merging partial attention states: (o_k, lse_k) over disjoint key sets combine to
// lse = log(sum_k e^lse_k), o = sum_k e^(lse_k - lse) o_k. Memory-bound: one warp per (token,
// head) row, lanes over the features (coalesced), fp32 accumulation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace hopattn::kernels::merge {

inline constexpr int kThreads = 128;
inline constexpr int kRowsPerBlock = kThreads / 32;  // one warp a row
inline constexpr int kFeaturesPerLane = 4;           // per pass: 128 features a warp

// States of one source: o [T, n, H, D] (n = 1 for merge_states' o_a / o_b), lse [T, n, H].
struct Source {
  const void* o;
  int64_t o_stride[3];  // token, state, head (elements; features contiguous)
  const float* lse;
  int64_t lse_stride[3];
  int n;
};

struct Params {
  Source src[2];  // merge_states: a and b (n = 1 each); merge_states_n: src[0] only
  int num_sources;
  int tokens, heads, dim;
  void* out;  // [T, H, D]
  int64_t out_stride[2];
  float* lse;  // optional [T, H]
  int64_t lse_stride[2];
};

template <class Elt>
__device__ __forceinline__ float load_elt(const void* base, int64_t i) {
  if constexpr (std::is_same_v<Elt, float>) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (std::is_same_v<Elt, __half>) {
    return __half2float(static_cast<const __half*>(base)[i]);
  } else {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
}

template <class Elt>
__device__ __forceinline__ void store_elt(void* base, int64_t i, float v) {
  if constexpr (std::is_same_v<Elt, float>) {
    static_cast<float*>(base)[i] = v;
  } else if constexpr (std::is_same_v<Elt, __half>) {
    static_cast<__half*>(base)[i] = __float2half_rn(v);
  } else {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
  }
}

// State k of row (t, h): its source and index within it.
__device__ __forceinline__ const Source& source_of(const Params& p, int& k) {
  if (k < p.src[0].n) return p.src[0];
  k -= p.src[0].n;
  return p.src[1];
}

__device__ __forceinline__ float state_lse(const Params& p, int k, int t, int h) {
  const Source& s = source_of(p, k);
  return s.lse[t * s.lse_stride[0] + k * s.lse_stride[1] + h * s.lse_stride[2]];
}

template <class In, class Out>
__global__ void __launch_bounds__(kThreads) merge_kernel(const __grid_constant__ Params p) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= int64_t(p.tokens) * p.heads) return;
  const int t = static_cast<int>(row / p.heads), h = static_cast<int>(row % p.heads);
  const int n = p.src[0].n + (p.num_sources > 1 ? p.src[1].n : 0);

  // Largest lse (a NaN anywhere poisons the result, as in the reference), then the sum.
  float mmax = -INFINITY;
  bool nan = false;
  for (int k = lane; k < n; k += 32) {
    const float l = state_lse(p, k, t, h);
    nan = nan || isnan(l);
    mmax = fmaxf(mmax, l);
  }
  for (int off = 16; off > 0; off /= 2) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, off));
  nan = __any_sync(0xffffffffu, nan);
  float total = 0.f;
  if (mmax != -INFINITY) {
    for (int k = lane; k < n; k += 32) total += expf(state_lse(p, k, t, h) - mmax);
  }
  for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(0xffffffffu, total, off);
  const float merged = nan ? NAN : (total > 0.f ? mmax + logf(total) : -INFINITY);
  const float inv = total > 0.f ? 1.f / total : 0.f;

  if (p.lse != nullptr && lane == 0) p.lse[t * p.lse_stride[0] + h * p.lse_stride[1]] = merged;
  const int64_t out_row = t * p.out_stride[0] + h * p.out_stride[1];
  for (int d0 = 0; d0 < p.dim; d0 += 32 * kFeaturesPerLane) {
    float acc[kFeaturesPerLane] = {};
    for (int k = 0; k < n; ++k) {
      const float l = state_lse(p, k, t, h);  // same address for the warp: one broadcast load
      // Empty states weigh 0 and are skipped, so their o is never read (0 * NaN would be NaN).
      const float w = nan ? NAN : (l == -INFINITY || total == 0.f ? 0.f : expf(l - mmax) * inv);
      if (w == 0.f) continue;
      int kk = k;
      const Source& s = source_of(p, kk);
      const int64_t base = t * s.o_stride[0] + kk * s.o_stride[1] + h * s.o_stride[2];
#pragma unroll
      for (int i = 0; i < kFeaturesPerLane; ++i) {
        const int d = d0 + i * 32 + lane;
        if (d < p.dim) acc[i] += w * load_elt<In>(s.o, base + d);
      }
    }
#pragma unroll
    for (int i = 0; i < kFeaturesPerLane; ++i) {
      const int d = d0 + i * 32 + lane;
      if (d < p.dim) store_elt<Out>(p.out, out_row + d, nan ? NAN : acc[i]);
    }
  }
}

}  // namespace hopattn::kernels::merge
