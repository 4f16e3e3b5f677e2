// Q of one MLA tile into shared memory: the first kRows (q token, head) rows, q_nope then q_pe
// (72 chunks of 16 bytes a row), by cp.async into 128B-swizzled panels of 64 columns. Shared by
// the schedules, whose Q buffers differ in rows (64, or 16 for the narrow one).
#pragma once

#include <cstdint>

#include "kernels/mla/tile.cuh"
#include "kernels/mla/traits.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/fence.cuh"
#include "ptx/named_barrier.cuh"

namespace hopattn::kernels::mla {

// 16-byte chunk `chunk` (of kQChunks: q_nope's 64, then q_pe's 8) of q at (token, head).
inline constexpr uint32_t kQChunks = kQkDim / 8;
template <class Elt>
__device__ __forceinline__ const Elt* q_chunk(const MlaParams& p, int64_t token, int64_t head,
                                              uint32_t chunk) {
  return chunk < 64 ? static_cast<const Elt*>(p.q_nope) + token * p.q_nope_stride[0] +
                          head * p.q_nope_stride[1] + chunk * 8
                    : static_cast<const Elt*>(p.q_pe) + token * p.q_pe_stride[0] +
                          head * p.q_pe_stride[1] + (chunk - 64) * 8;
}

// Threads tid = 0..threads-1 (the consumer warpgroups) copy; rows past the tile's valid ones are
// zeros. Returns once the copies have landed, are visible to wgmma (proxy fence) and every
// copying thread has passed barrier kQReady.
template <class Elt, int kRows>
__device__ void load_q_tile(const MlaParams& p, const Tile& t, uint32_t dst, uint32_t panel_bytes,
                            uint32_t tid, uint32_t threads) {
  for (uint32_t i = tid; i < kRows * kQChunks; i += threads) {
    const uint32_t row = i / kQChunks, chunk = i % kQChunks;
    const Elt* src = static_cast<const Elt*>(p.q_nope);
    int bytes = 0;
    if (static_cast<int>(row) < t.rows) {
      const Tile::RowPosition at = t.position(p, static_cast<int>(row));
      src = q_chunk<Elt>(p, at.q_row(t), at.head, chunk);
      bytes = 16;
    }
    ptx::cp_async_16(dst + swizzled_offset(panel_bytes, row, chunk), src, bytes);
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  ptx::fence_proxy_async_shared();  // generic-proxy writes, read next by wgmma
  ptx::named_barrier_sync(kQReady, threads);
}

}  // namespace hopattn::kernels::mla
