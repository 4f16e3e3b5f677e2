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

// Threads tid = 0..threads-1 (the consumer warpgroups) copy; rows past the tile's valid ones are
// zeros. Returns once the copies have landed, are visible to wgmma (proxy fence) and every
// copying thread has passed barrier kQReady.
template <class Elt, int kRows>
__device__ void load_q_tile(const MlaParams& p, const Tile& t, uint32_t dst, uint32_t panel_bytes,
                            uint32_t tid, uint32_t threads) {
  const Elt* qn = static_cast<const Elt*>(p.q_nope);
  const Elt* qp = static_cast<const Elt*>(p.q_pe);
  for (uint32_t i = tid; i < kRows * 72; i += threads) {
    const uint32_t row = i / 72, chunk = i % 72;
    const Elt* src = qn;
    int bytes = 0;
    if (static_cast<int>(row) < t.rows) {
      const Tile::RowPosition at = t.position(p, static_cast<int>(row));
      const int64_t tok = at.q_row(t), head = at.head;
      src = chunk < 64 ? qn + tok * p.q_nope_stride[0] + head * p.q_nope_stride[1] + chunk * 8
                       : qp + tok * p.q_pe_stride[0] + head * p.q_pe_stride[1] + (chunk - 64) * 8;
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
