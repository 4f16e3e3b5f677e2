// mma.sync m16n8k16 tiles with a block's 16 keys as M and up to 8 query rows as N (S^T = K q^T,
// O^T += V^T P^T), for kernels whose rows are too few for an m16 tile of rows: the decode
// family's narrow kernel and the batch family's side lane. Element e of a lane's S^T fragment
// (lane = 4g + qd) is key g + 8 (e >> 1), row 2qd + (e & 1): a row's 16 keys lie on the 8 lanes
// of one qd.
#pragma once

#include <cstdint>

#include "kernels/common/math_constants.hpp"
#include "ptx/fast_math.cuh"
#include "ptx/ldmatrix.cuh"
#include "ptx/pack.cuh"

namespace hopattn::kernels {

// The largest and the sum of a per-lane value over the 8 lanes of one qd (lanes qd, qd + 4, ..),
// which every one of them gets: a row's values over the keys, in this layout.
__device__ __forceinline__ float keys_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
}
__device__ __forceinline__ float keys_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  x += __shfl_xor_sync(0xffffffffu, x, 8);
  return x + __shfl_xor_sync(0xffffffffu, x, 16);
}

// The largest of row 2qd + h's 16 values of an S^T fragment.
__device__ __forceinline__ float keys_max(const float (&s)[4], int h) {
  return keys_max(fmaxf(s[h], s[2 + h]));
}

// One block's lazy online-softmax step for this lane's rows 2qd + h: a row's base row_max[h]
// (logit units; scale_log2 takes logits to log2 units) moves only for a logit
// 2^kLazyRescaleLog2 above it (a row's first visible key moves it from -inf), s becomes P =
// 2^(s * scale_log2 - base) (a row with no visible key yet takes base 0: P = 0), the lane's part
// of the row sums follows, and correction[h] is the factor O's rows take. Returns whether any
// lane's O needs it (warp-uniform). NaN compares false and is kept by exp2.
__device__ __forceinline__ bool keys_softmax_lazy(float (&s)[4], float (&row_max)[2],
                                                  float (&row_sum)[2], float (&correction)[2],
                                                  float scale_log2) {
  bool moved = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m = keys_max(s, h);
    const bool move = (m - row_max[h]) * scale_log2 > kLazyRescaleLog2;
    correction[h] = move ? ptx::exp2_approx((row_max[h] - m) * scale_log2) : 1.f;
    if (move) row_max[h] = m;
    moved = moved || move;
    const float base = row_max[h] == -INFINITY ? 0.f : row_max[h] * scale_log2;
    s[h] = ptx::exp2_approx(fmaf(s[h], scale_log2, -base));
    s[2 + h] = ptx::exp2_approx(fmaf(s[2 + h], scale_log2, -base));
    row_sum[h] = row_sum[h] * correction[h] + s[h] + s[2 + h];
  }
  return __any_sync(0xffffffffu, moved);
}

// P^T's two 8x8 halves (keys 0-7, 8-15) transposed into the B fragments of O^T += V^T P^T.
template <class Elt>
__device__ __forceinline__ void keys_p_fragments(const float (&p)[4], uint32_t& b0, uint32_t& b1) {
  b0 = ptx::movmatrix_trans(ptx::pack2<Elt>(p[0], p[1]));
  b1 = ptx::movmatrix_trans(ptx::pack2<Elt>(p[2], p[3]));
}

}  // namespace hopattn::kernels
