// The device side of merging attention states (o_k, lse_k) over disjoint key sets, for every
// kernel that merges: the merge family, the batch family's merge pass and decode's split merge.
//   lse = log(sum_k e^lse_k),  o = sum_k e^(lse_k - lse) o_k
// computed as top = max_k lse_k, total = sum_k e^(lse_k - top), so that no exponential overflows.
// An empty state (lse = -inf) weighs 0 and its o is never read (0 * NaN would be NaN); a NaN lse
// makes the merged row NaN, as in the CPU reference. The callers keep their own loops over the
// states (lane-strided, one thread a row, or split weights staged in shared memory): these are
// the pieces whose arithmetic must be the same everywhere.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace hopattn::kernels {

// Butterfly reductions over the 32 lanes of a warp: every lane ends with the result.
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// The merged lse (natural log) from the two passes; -inf when there is no state to merge.
__device__ __forceinline__ float merged_lse(float top, float total) {
  return total > 0.f ? top + logf(total) : -INFINITY;
}

// Weight of the state of lse `l` in the merge (inv = 1 / total, or 0): 0 for an empty state.
__device__ __forceinline__ float state_weight(float l, float top, float total, float inv) {
  return l == -INFINITY || total == 0.f ? 0.f : expf(l - top) * inv;
}

}  // namespace hopattn::kernels
