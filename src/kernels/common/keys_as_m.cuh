// mma.sync m16n8k16 tiles with a block's 16 keys as M and up to 8 query rows as N (S^T = K q^T,
// O^T += V^T P^T), for kernels whose rows are too few for an m16 tile of rows: the decode
// family's narrow kernel and the batch family's side lane. Element e of a lane's S^T fragment
// (lane = 4g + qd) is key g + 8 (e >> 1), row 2qd + (e & 1): a row's 16 keys lie on the 8 lanes
// of one qd.
#pragma once

#include <cstdint>

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

// P^T's two 8x8 halves (keys 0-7, 8-15) transposed into the B fragments of O^T += V^T P^T.
template <class Elt>
__device__ __forceinline__ void keys_p_fragments(const float (&p)[4], uint32_t& b0, uint32_t& b1) {
  b0 = ptx::movmatrix_trans(ptx::pack2<Elt>(p[0], p[1]));
  b1 = ptx::movmatrix_trans(ptx::pack2<Elt>(p[2], p[3]));
}

}  // namespace hopattn::kernels
