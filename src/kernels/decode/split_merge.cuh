// Decode kernel, split mode: each CTA of a problem (request, KV head, row tile) that saw one
// split of the keys writes its partial state (fp32 o and log2 lse) to the workspace (in the
// kernel's body); the last one to finish, elected by a semaphore, merges them here (no second
// launch: at batch 1 the merge is on the critical path). Schedule: README.md beside this file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/state_merge.cuh"
#include "kernels/decode/epilogue.cuh"

namespace hopattn::kernels::decode {

// Merge of a problem's split partials, the first `rows` rows of the row tile, into out and lse.
// Weights of every (row, split): w = 2^(lse_s - max) / sum * (output factor of the row), in
// `weight` (shared, rows x num_splits floats). Every thread of the CTA calls it.
template <int kHeadDim, class Elt, bool kPrefetch>
__device__ __forceinline__ void merge_splits(const Params& p, int request, int kv_head,
                                             int row_tile, int rows, float v_scale, float* weight) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int row_begin = row_tile * p.rows_per_cta;
  const int64_t problem = (int64_t(request) * p.num_kv_heads + kv_head) * p.row_tiles + row_tile;
  // One warp a row, lanes over the splits: at batch 1 this merge is on the critical path of the
  // whole launch, so no thread walks the splits alone.
  const int splits = p.num_splits;
  const float* lse_all = p.partial_lse + problem * splits * p.rows_per_cta;
  const float* o_all = p.partial_o + problem * splits * p.rows_per_cta * kHeadDim;
  // D <= 128: thread per (row, 4 features), the splits kUnroll at a time with every load issued
  // before the first use. kPrefetch: the first item's first kUnroll partials are loaded before
  // the weights are computed, one L2 round trip off the last CTA's path (at batch 1 each thread
  // has one item).
  constexpr int kUnroll = 16;
  constexpr int kQuads = kHeadDim / 4;
  const int items = rows * kQuads;
  float4 first[kUnroll];  // without kPrefetch never used, so never allocated
  if constexpr (kPrefetch) {
    const float* src = o_all + int64_t(tid / kQuads) * kHeadDim + 4 * (tid % kQuads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      first[u] = tid < items && u < splits ? __ldcg(reinterpret_cast<const float4*>(
                                                 src + int64_t(u) * p.rows_per_cta * kHeadDim))
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  for (int rr = warp; rr < rows; rr += kWarps) {
    float* w = weight + rr * splits;
    float mmax = -INFINITY;
    for (int s = lane; s < splits; s += 32) {
      w[s] = __ldcg(lse_all + s * p.rows_per_cta + rr);
      mmax = fmaxf(mmax, w[s]);
    }
    mmax = warp_max(mmax);
    float total = 0.f;
    for (int s = lane; s < splits; s += 32) {
      w[s] = mmax == -INFINITY ? 0.f : exp2f(w[s] - mmax);
      total += w[s];
    }
    total = warp_sum(total);
    float scale = 0.f;
    if (lane == 0) {
      const float lse2 = total > 0.f ? mmax + log2f(total) : -INFINITY;
      const float f = finish_row(p, request, kv_head, row_begin + rr, lse2, v_scale);
      scale = total > 0.f ? f / total : 0.f;
    }
    scale = __shfl_sync(0xffffffffu, scale, 0);
    for (int s = lane; s < splits; s += 32) w[s] *= scale;
  }
  __syncthreads();
  if constexpr (kHeadDim == 256) {
    // D = 256 runs at 255 registers, and the unrolled loop below makes ptxas spill there (32
    // bytes, ptxas 13.0): one split at a time, 8 features a thread.
    for (int idx = tid; idx < rows * (kHeadDim / 8); idx += kThreads) {
      const int rr = idx / (kHeadDim / 8), d = 8 * (idx % (kHeadDim / 8));
      const float* w = weight + rr * splits;
      float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int s = 0; s < splits; ++s) {
        const float c = w[s];
        if (c == 0.f) continue;  // empty split: weight 0
        const float4* src = reinterpret_cast<const float4*>(
            o_all + (int64_t(s) * p.rows_per_cta + rr) * kHeadDim + d);
        const float4 a = __ldcg(src), b = __ldcg(src + 1);
        v[0] += c * a.x, v[1] += c * a.y, v[2] += c * a.z, v[3] += c * a.w;
        v[4] += c * b.x, v[5] += c * b.y, v[6] += c * b.z, v[7] += c * b.w;
      }
      store_out8<Elt>(p, request, kv_head, row_begin + rr, d, v);
    }
  } else {
    for (int idx = tid; idx < items; idx += kThreads) {
      const int rr = idx / kQuads, d = 4 * (idx % kQuads);
      const float* w = weight + rr * splits;
      const float* src = o_all + int64_t(rr) * kHeadDim + d;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s0 = 0; s0 < splits; s0 += kUnroll) {
        float4 x[kUnroll];
        float c[kUnroll];
        const bool prefetched = kPrefetch && idx == tid && s0 == 0;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int s = s0 + u;
          c[u] = s < splits ? w[s] : 0.f;
          if (prefetched) {
            x[u] = first[u];
          } else {
            x[u] = s < splits ? __ldcg(reinterpret_cast<const float4*>(
                                    src + int64_t(s) * p.rows_per_cta * kHeadDim))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          // An empty split weighs 0 and its o is ignored, whatever it holds (0 * NaN is NaN).
          if (c[u] != 0.f) {
            acc.x += c[u] * x[u].x, acc.y += c[u] * x[u].y;
            acc.z += c[u] * x[u].z, acc.w += c[u] * x[u].w;
          }
        }
      }
      store_out4<Elt>(p, request, kv_head, row_begin + rr, d, acc);
    }
  }
}

}  // namespace hopattn::kernels::decode
