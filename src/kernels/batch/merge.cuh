// The batch family's merge pass: rows whose keys the plan split over several work items get their
// partial states (fp32 O normalized over the item's keys, and its LSE) combined into out / lse,
//   lse = log(sum_k e^lse_k + e^sink),  out = sum_k e^(lse_k - lse) o_k,
// with the row's sink (if any) counted here, once, as a state of no value (the work items leave
// it out). A NaN partial makes the row NaN, as in the reference. One warp per row; the grid is
// fixed (a CUDA graph replays it over any later plan) and strides over the merge records the
// plan's device copy lists, so a plan without splits costs one empty launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/state_merge.cuh"
#include "plan/batch_plan_layout.hpp"
#include "ptx/grid_dependency.cuh"

namespace hopattn::kernels::batch {

inline constexpr int kMergeThreads = 256;
inline constexpr int kMergeWarps = kMergeThreads / 32;

struct MergeParams {
  const uint8_t* plan = nullptr;  // the plan's device copy
  const float* partial_o = nullptr;
  const float* partial_lse = nullptr;
  const float* sinks = nullptr;  // fp32 [Hq] or null
  int64_t sinks_stride = 1;      // elements from one q head's sink to the next (any sign)
  void* out = nullptr;
  int64_t out_row_stride = 0, out_head_stride = 0;  // elements
  float* lse = nullptr;
  int64_t lse_row_stride = 0, lse_head_stride = 0;
  int group = 1;
  int dv = 128;
};

template <class Elt>
__device__ __forceinline__ void store4(Elt* dst, float a, float b, float c, float d) {
  if constexpr (std::is_same_v<Elt, __half>) {
    const __half2 lo = __floats2half2_rn(a, b), hi = __floats2half2_rn(c, d);
    *reinterpret_cast<uint2*>(dst) = make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                                                *reinterpret_cast<const uint32_t*>(&hi));
  } else {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
    *reinterpret_cast<uint2*>(dst) = make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                                                *reinterpret_cast<const uint32_t*>(&hi));
  }
}

template <class Elt>
__global__ void __launch_bounds__(kMergeThreads)
    merge_kernel(const __grid_constant__ MergeParams p) {
  ptx::wait_for_prior_grids();  // the partials and the plan: the batch kernel's, the copy's
  const auto& header = *reinterpret_cast<const plan::BatchPlanHeader*>(p.plan);
  const auto* merges =
      reinterpret_cast<const plan::BatchMergeRecord*>(p.plan + header.merges_offset);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  for (int m = static_cast<int>(blockIdx.x); m < header.num_merges;
       m += static_cast<int>(gridDim.x)) {
    const plan::BatchMergeRecord rec = merges[m];
    for (int r = rec.row_begin + warp; r < rec.row_end; r += kMergeWarps) {
      const int64_t first = static_cast<int64_t>(rec.partial_row) + (r - rec.row_begin);
      const int head = rec.kv_head * p.group + r % p.group;
      const int64_t q_row = static_cast<int64_t>(rec.q_start) + r / p.group;
      const float sink = p.sinks != nullptr ? p.sinks[head * p.sinks_stride] : -INFINITY;
      // Largest lse over the splits (lane-strided) and the sink; a NaN anywhere poisons the row.
      float top = sink;
      bool nan = sink != sink;
      for (int k = lane; k < rec.num_splits; k += 32) {
        const float l = p.partial_lse[first + int64_t{k} * rec.partial_stride];
        nan = nan || l != l;
        top = fmaxf(top, l);
      }
      top = warp_max(top);
      nan = __any_sync(~0u, nan);
      float total = 0.f;
      if (top != -INFINITY) {
        for (int k = lane; k < rec.num_splits; k += 32) {
          total += expf(p.partial_lse[first + int64_t{k} * rec.partial_stride] - top);
        }
      }
      total = warp_sum(total);
      if (top != -INFINITY && sink != -INFINITY) total += expf(sink - top);
      const float inv = total > 0.f ? 1.f / total : 0.f;
      const float merged = nan ? NAN : merged_lse(top, total);
      if (lane == 0) p.lse[q_row * p.lse_row_stride + head * p.lse_head_stride] = merged;
      Elt* out = static_cast<Elt*>(p.out) + q_row * p.out_row_stride + head * p.out_head_stride;
      for (int d = 4 * lane; d < p.dv; d += 128) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int k = 0; k < rec.num_splits; ++k) {
          const int64_t row = first + int64_t{k} * rec.partial_stride;
          const float l = p.partial_lse[row];
          // An empty split weighs 0 and is not read (its O is 0 anyway).
          const float w = state_weight(l, top, total, inv);
          if (w == 0.f) continue;
          const float4 v = *reinterpret_cast<const float4*>(p.partial_o + row * p.dv + d);
          acc.x = fmaf(w, v.x, acc.x);
          acc.y = fmaf(w, v.y, acc.y);
          acc.z = fmaf(w, v.z, acc.z);
          acc.w = fmaf(w, v.w, acc.w);
        }
        if (nan) acc = make_float4(NAN, NAN, NAN, NAN);
        store4<Elt>(out + d, acc.x, acc.y, acc.z, acc.w);
      }
    }
  }
}

}  // namespace hopattn::kernels::batch
