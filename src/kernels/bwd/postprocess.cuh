// Last stage of the backward: dQ = scale * dq_accum, from the fp32 fragment-order tiles of the
// workspace to the caller's dq in the input dtype; the sink gradient summed over the per-tile
// partials in a fixed order; and, for varlen, zeros in the dK/dV rows past cu_seqlens_k[B] (the
// reference zeroes every row no request owns).
#pragma once

#include <cstdint>

#include "kernels/bwd/traits.cuh"
#include "ptx/pack.cuh"

namespace hopattn::kernels::bwd {

inline constexpr int kPostprocessThreads = 256;

// Dynamic shared memory of postprocess_kernel: one tile of 16-bit values, rows padded by 8
// elements (16 bytes) so that the fragment-order writes hit distinct banks.
inline constexpr size_t postprocess_smem_bytes(int block_m, int head_dim) {
  return static_cast<size_t>(block_m) * (head_dim + 8) * 2;
}

// One block per (q tile m, head, request): read the tile in fragment order (coalesced 16-byte
// loads), scale, convert, transpose through shared memory, write the valid rows with 16-byte
// stores.
template <class Elt>
__global__ void __launch_bounds__(kPostprocessThreads)
    postprocess_kernel(const __grid_constant__ RowKernelParams p) {
  extern __shared__ uint4 smem_tile[];
  const int m = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const SeqInfo s = seq_info(p.seq, p.ws, p.block_m, b);
  const int row0 = m * p.block_m;
  if (row0 >= s.seqlen_q) return;
  const int rows_valid = min(p.block_m, s.seqlen_q - row0);
  const int d = p.head_dim;
  const int pitch = d + 8;  // elements per shared row
  auto* tile = reinterpret_cast<uint32_t*>(smem_tile);

  const int64_t tile_index = (head * p.ws.rows + s.ws_row0) / p.block_m + m;
  const auto* src = reinterpret_cast<const float4*>(p.ws.dq_accum + tile_index * p.block_m * d);
  constexpr int kChunksPerPanel = kDqPanelFloats / 4;
  for (int k = static_cast<int>(threadIdx.x); k < p.block_m * d / 4; k += kPostprocessThreads) {
    const float4 v = src[k];
    const int panel = k / kChunksPerPanel;
    const int c = (k % kChunksPerPanel) / 128;
    const int t = k % 128;
    const int r = 16 * (t / 32) + (t % 32) / 4;
    const int col = kDqPanelCols * panel + 8 * c + 2 * (t % 4);
    tile[(r * pitch + col) / 2] = ptx::pack2<Elt>(v.x * p.scale, v.y * p.scale);
    tile[((r + 8) * pitch + col) / 2] = ptx::pack2<Elt>(v.z * p.scale, v.w * p.scale);
  }
  __syncthreads();

  const int chunks_per_row = d / 8;
  Elt* dq = static_cast<Elt*>(p.dq.data) + b * p.dq.batch_stride + head * p.dq.head_stride;
  for (int k = static_cast<int>(threadIdx.x); k < rows_valid * chunks_per_row;
       k += kPostprocessThreads) {
    const int r = k / chunks_per_row, c = k % chunks_per_row;
    const uint4 v = smem_tile[(r * pitch + 8 * c) / 8];
    *reinterpret_cast<uint4*>(dq + static_cast<int64_t>(s.row_q + row0 + r) * p.dq.row_stride +
                              8 * c) = v;
  }
}

// One warp per q head: lane l sums the tiles of requests l, l + 32, ... in order, then a fixed
// butterfly combines the lanes (the same bits on every run).
__global__ void __launch_bounds__(32)
    dsink_reduce_kernel(const __grid_constant__ RowKernelParams p) {
  const int head = static_cast<int>(blockIdx.x);
  const int lane = static_cast<int>(threadIdx.x);
  float acc = 0.f;
  for (int b = lane; b < p.seq.batch; b += 32) {
    const SeqInfo s = seq_info(p.seq, p.ws, p.block_m, b);
    const int tiles = (s.seqlen_q + p.block_m - 1) / p.block_m;
    const float* part = p.ws.dsink + (head * p.ws.rows + s.ws_row0) / p.block_m;
    for (int m = 0; m < tiles; ++m) acc += part[m];
  }
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane == 0) p.dsinks[head * p.dsinks_stride] = acc;
}

// Rows [cu_seqlens_k[batch], rows) of a varlen dK or dV ([rows, heads, dim], 16-bit elements).
struct TailRows {
  uint16_t* data = nullptr;
  int64_t row_stride = 0, head_stride = 0;
  int rows = 0, heads = 0, dim = 0;
  const int* cu_seqlens_k = nullptr;
  int batch = 0;
};

__global__ void zero_tail_rows_kernel(const __grid_constant__ TailRows t) {
  // Clamped as seq_info clamps it (a bad entry past the rows leaves nothing to clear).
  const int last = t.cu_seqlens_k[t.batch];
  const int first = last < 0 ? 0 : (last > t.rows ? t.rows : last);
  const int64_t per_row = int64_t{t.heads} * t.dim;
  const int64_t count = (t.rows - first) * per_row;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < count;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = first + k / per_row;
    const int64_t rem = k % per_row;
    t.data[row * t.row_stride + (rem / t.dim) * t.head_stride + rem % t.dim] = 0;
  }
}

}  // namespace hopattn::kernels::bwd
