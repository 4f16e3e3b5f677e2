// The 16-bit output path of the wgmma kernels (fwd, mla): a warpgroup's m64 x N fp32 accumulator,
// scaled per row, staged as 16-bit values in 128B-swizzled shared-memory panels (64 columns of
// 128-byte rows, 16-byte chunk c of row r at chunk c ^ (r % 8), the layout TMA reads), and rows
// of those panels copied to global memory by 16-byte chunks.
//
// Why not store from the accumulator: there a warp's store covers 16 bytes in each of 8 rows,
// eight times the L2 write requests of a staged row's 512 contiguous bytes (ncu of an mla call of
// one block a CTA, run set o: the register-fragment stores were ~40% of the consumer warps'
// samples, stalled on LG throttle).
#pragma once

#include <cstdint>

#include "ptx/pack.cuh"
#include "ptx/shared_memory.cuh"

namespace hopattn::kernels {

inline constexpr uint32_t kOPanelRowBytes = 128;  // 64 16-bit columns

// Accumulator register i of thread `tid` (0..127 of the warpgroup) holds column
// 8 * (i >> 2) + 2 * (lane % 4) + (i & 1) of row 16 * warp + lane / 4 + 8 * ((i >> 1) & 1).
// Columns 8c..8c+7 of a row are 16-byte chunk c % 8 of panel c / 8, stored at chunk
// (c % 8) ^ (row % 8); both rows of a thread have row % 8 = lane / 4. One 4-byte pair per store:
// a warp's 32 stores of one (c, half) hit 8 rows in 8 distinct chunks, all 32 banks once. The
// lane goes through opaque() so that the compiler computes the addresses here rather than keeping
// all of them live (and spilled) through a caller's mainloop.
template <class Elt, int kORegs>
__device__ __forceinline__ void stage_o_panels(uint32_t smem, uint32_t panel_stride,
                                               const float (&o)[kORegs],
                                               const float (&row_scale)[2]) {
  const uint32_t tid = threadIdx.x % 128;
  const uint32_t lane = ptx::opaque(tid % 32);
  const uint32_t row_addr =
      smem + ((tid / 32) * 16 + (lane >> 2)) * kOPanelRowBytes + (lane & 3u) * 4u;
  const uint32_t swizzle = lane >> 2;  // row % 8
#pragma unroll
  for (int c = 0; c < kORegs / 4; ++c) {
    const uint32_t chunk_addr =
        row_addr + (c / 8) * panel_stride + ((static_cast<uint32_t>(c % 8) ^ swizzle) << 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t packed =
          ptx::pack2<Elt>(o[4 * c + 2 * h] * row_scale[h], o[4 * c + 2 * h + 1] * row_scale[h]);
      ptx::st_shared_u32(chunk_addr + h * 8 * kOPanelRowBytes, packed);
    }
  }
}

// Rows [0, rows) of kCols columns from the panels at `smem` (row 0's row % 8 must be 0) to
// row_pointer(r), a global Elt* to the row's first column, by 16-byte chunks: chunk `index`,
// index + threads, ... of the rows' chunks in row-major order, so that consecutive threads write
// consecutive bytes of a row. kZeros: zeros, shared memory untouched.
template <class Elt, int kCols, bool kZeros = false, class RowPointer>
__device__ __forceinline__ void store_panel_rows(uint32_t smem, uint32_t panel_stride, int rows,
                                                 int index, int threads,
                                                 const RowPointer& row_pointer) {
  constexpr int kChunksPerRow = kCols * static_cast<int>(sizeof(Elt)) / 16;
  constexpr int kChunksPerPanelRow = kOPanelRowBytes / 16;
  for (int idx = index; idx < rows * kChunksPerRow; idx += threads) {
    const int r = idx / kChunksPerRow;
    const int chunk = idx % kChunksPerRow;
    const int panel = chunk / kChunksPerPanelRow;
    const int in_row = chunk % kChunksPerPanelRow;
    const uint4 v = kZeros ? make_uint4(0u, 0u, 0u, 0u)
                           : ptx::ld_shared_v4(smem + panel * panel_stride + r * kOPanelRowBytes +
                                               ((in_row ^ (r % 8)) * 16));
    *reinterpret_cast<uint4*>(row_pointer(r) + chunk * 8) = v;
  }
}

}  // namespace hopattn::kernels
