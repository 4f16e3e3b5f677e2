// First stage of the backward: per query row, D = rowsum(dO * O) in fp32 and lse in base 2, into
// the workspace's padded row layout (workspace.hpp), so the main kernel loads a q tile's
// statistics with one bulk copy; plus the per-tile partial sums of the sink gradient. (dq_accum
// and the semaphores are cleared by a memset before this runs.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/bwd/traits.cuh"
#include "kernels/common/math_constants.hpp"

namespace hopattn::kernels::bwd {

inline constexpr int kPreprocessThreads = 128;

template <class Elt>
__device__ __forceinline__ float2 unpack2(uint32_t bits) {
  if constexpr (std::is_same_v<Elt, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
}

template <class Elt>
__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  float acc = 0.f;
  const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = unpack2<Elt>(av[i]), y = unpack2<Elt>(bv[i]);
    acc = fmaf(x.x, y.x, acc);
    acc = fmaf(x.y, y.y, acc);
  }
  return acc;
}

// One block per (q tile m, head, request). A row's Dv/8 16-byte chunks go to Dv/8 consecutive
// lanes (8, 16 or 32), so a warp covers 32 / (Dv/8) rows per pass; rows past the sequence's end
// (up to the tile's kBlockM) get lse_log2 = +inf and D = 0, which zero their P in the main kernel.
template <class Elt>
__global__ void __launch_bounds__(kPreprocessThreads)
    preprocess_kernel(const __grid_constant__ RowKernelParams p) {
  __shared__ float sink_terms[128];
  const int m = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  // The first kernel of the three records a bad cu_seqlens pair (the main kernel's registers are
  // too tight for the call; all three clamp it the same way).
  const SeqInfo s = seq_info</*kReport=*/true>(p.seq, p.ws, p.block_m, b);
  const int row0 = m * p.block_m;
  if (row0 >= s.seqlen_q) return;

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int chunks = p.head_dim_v / 8;
  const int rows_per_pass = 32 / chunks;
  const int chunk = lane % chunks;
  const int64_t ws_row = head * p.ws.rows + s.ws_row0 + row0;
  const bool sink_grad = p.sinks != nullptr && p.dsinks != nullptr;
  const float sink = sink_grad ? p.sinks[head * p.sinks_stride] : 0.f;
  // block_m is a multiple of 4 * rows_per_pass, so every lane runs the same number of passes.
  for (int r = warp * rows_per_pass + lane / chunks; r < p.block_m;
       r += (kPreprocessThreads / 32) * rows_per_pass) {
    const int i = row0 + r;
    const bool valid = i < s.seqlen_q;
    float acc = 0.f;
    if (valid) {
      const int64_t row = s.row_q + i;
      const Elt* o = static_cast<const Elt*>(p.out.data) + b * p.out.batch_stride +
                     row * p.out.row_stride + head * p.out.head_stride + chunk * 8;
      const Elt* d = static_cast<const Elt*>(p.dout.data) + b * p.dout.batch_stride +
                     row * p.dout.row_stride + head * p.dout.head_stride + chunk * 8;
      acc = dot8<Elt>(*reinterpret_cast<const uint4*>(o), *reinterpret_cast<const uint4*>(d));
    }
    for (int offset = chunks / 2; offset > 0; offset /= 2) {
      acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    }
    if (chunk == 0) {
      float lse_log2 = INFINITY, delta = 0.f, sink_term = 0.f;
      if (valid) {
        const float* lse_row = static_cast<const float*>(p.lse.data) + b * p.lse.batch_stride +
                               static_cast<int64_t>(s.row_q + i) * p.lse.row_stride +
                               head * p.lse.head_stride;
        const float lse = *lse_row;
        delta = acc;
        // lse = -inf: the row sees no key (and there is no sink); +inf makes its P exactly 0.
        lse_log2 = lse == -INFINITY ? INFINITY : lse * kLog2e;
        // d lse / d sink = p_sink = e^(sink - lse); the sink gradient is -p_sink * D.
        if (sink_grad && lse != -INFINITY) sink_term = -expf(sink - lse) * acc;
      }
      p.ws.lse_log2[ws_row + r] = lse_log2;
      p.ws.delta[ws_row + r] = delta;
      sink_terms[r] = sink_term;
    }
  }
  if (sink_grad) {
    __syncthreads();
    if (threadIdx.x == 0) {
      float sum = 0.f;  // a fixed order: the same bits on every run
      for (int r = 0; r < p.block_m; ++r) sum += sink_terms[r];
      p.ws.dsink[ws_row / p.block_m] = sum;
    }
  }
}

}  // namespace hopattn::kernels::bwd
