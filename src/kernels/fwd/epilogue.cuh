// Epilogue of the fwd kernel: one consumer warpgroup normalizes its 64 x Dv rows of O, stages them
// as 16-bit values in its own 128B-swizzled shared-memory panels and stores them with TMA; it also
// writes the LSE of its rows.
//
// A dense tensor is 4-D for TMA, so rows past seqlen_q fall outside the tensor and the store clips
// them. A varlen tensor is one long [total, H, D] sequence: rows past a sequence's end belong to
// the next one, so a warpgroup whose 64 rows run past the end writes its valid rows with plain
// 16-byte stores instead. With GQA packing rows are (q position, q head) pairs (traits.cuh,
// PackParams): the TMA box covers pack heads x 64 / pack positions when pack divides 64; other
// groups always take the plain stores, which address each row's position and head.
//
// With Traits::kOInQ the staging panels are the consumer's own rows of the Q buffer (traits.cuh).
// The producer loads the next tile's Q there once all 256 consumer threads arrived on q_empty,
// which they do here, after the staging buffer is no longer read: the storing thread after its
// TMA store's bulk async-group has finished reading (cp.async.bulk.wait_group.read), the others
// after their own reads (plain stores) or right away. A tile without KV blocks loads no Q
// (the producer skips it): its consumers then write the zeros straight from registers and leave
// shared memory alone.
#pragma once

#include <cmath>

#include "kernels/common/o_panels.cuh"
#include "kernels/fwd/mask.cuh"
#include "kernels/fwd/traits.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/tma.cuh"

namespace hopattn::kernels::fwd {

template <class Traits>
struct FwdEpilogue {
  using Elt = typename Traits::Elt;
  static constexpr int kPanels = Traits::kHeadDimV / Traits::kPanelCols;

  __device__ static void store(const FwdParams& p, const SharedPlan<Traits>& sm, const WorkTile& w,
                               const TileInfo& t, int consumer, float (&o)[Traits::kORegs],
                               const float (&out_scale)[2], const float (&lse)[2]) {
    const int tid = static_cast<int>(threadIdx.x) % 128;
    const int lane = tid % 32;
    const int warp_row = (tid / 32) * 16 + lane / 4;  // this thread's rows: warp_row, warp_row + 8
    uint8_t* smem_o = sm.o(consumer);
    const uint32_t smem_o_addr = ptx::opaque(ptx::smem_address(smem_o));
    const uint32_t barrier = kEpilogue0 + consumer;

    // The previous tile's TMA store must be done reading the staging buffer (kOInQ: it was, before
    // this tile's Q could arrive). The barrier also orders every warp's last GEMM (which read this
    // warpgroup's Q rows) before any write to them.
    if (!Traits::kOInQ && tid == 0) ptx::tma_store_wait_read<0>();
    ptx::named_barrier_sync(barrier, 128);

    stage_o_panels<Elt, Traits::kORegs>(smem_o_addr, Traits::kOPanelStride, o, out_scale);
    ptx::fence_proxy_async_shared();  // generic-proxy writes, read next by the TMA engine
    ptx::named_barrier_sync(barrier, 128);

    const int row_first = consumer * Traits::kRowsPerConsumer;  // tile row
    const int rows_valid = min(Traits::kRowsPerConsumer, t.rows(p) - row_first);
    bool stored_by_tma = false;
    if (rows_valid > 0) {
      stored_by_tma = p.pack.o_by_tma &&
                      (p.seq.cu_seqlens_q == nullptr || rows_valid == Traits::kRowsPerConsumer);
      if (stored_by_tma) {
        if (tid == 0) {
          // Box (64 columns, pack heads, 64 / pack positions); pack divides 64 here.
          const int q_pos = row_address(p, w, t, row_first).q_pos;
#pragma unroll
          for (int i = 0; i < kPanels; ++i) {
            ptx::tma_store_4d(&p.tm_o, smem_o + i * Traits::kOPanelStride, i * Traits::kPanelCols,
                              w.head * p.pack.pack, t.row_q + q_pos, t.batch_coord);
          }
          ptx::tma_store_commit();
        }
      } else {
        store_rows_direct<false>(p, w, t, smem_o_addr, row_first, rows_valid, tid);
      }
    }
    store_lse(p, w, t, row_first + warp_row, lane, lse);
    if constexpr (Traits::kOInQ) {
      // Hand the Q buffer back (after the LSE stores, which overlap the TMA store's reads).
      if (stored_by_tma && tid == 0) ptx::tma_store_wait_read<0>();
      ptx::mbarrier_arrive(sm.q_empty());
    }
  }

  // kOInQ, a tile without KV blocks (no Q was loaded, the buffer may hold the next tile's): every
  // row is zero (out_scale is 0 for a row that sees no key), written from registers.
  __device__ static void store_empty(const FwdParams& p, const WorkTile& w, const TileInfo& t,
                                     int consumer, const float (&lse)[2]) {
    const int tid = static_cast<int>(threadIdx.x) % 128;
    const int row_first = consumer * Traits::kRowsPerConsumer;
    const int rows_valid = min(Traits::kRowsPerConsumer, t.rows(p) - row_first);
    if (rows_valid > 0) store_rows_direct<true>(p, w, t, 0, row_first, rows_valid, tid);
    store_lse(p, w, t, row_first + (tid / 32) * 16 + tid % 32 / 4, tid % 32, lse);
  }

  // A KV split of the batch family: this warpgroup's rows of normalized O and their LSE, in fp32,
  // to partial-state rows partial_row + tile row (batch_plan_layout.hpp), straight from
  // registers; the merge pass combines the splits. kOInQ: the Q buffer goes back as in store().
  __device__ static void store_partial(const FwdParams& p, const SharedPlan<Traits>& sm,
                                       const TileInfo& t, int partial_row, int consumer,
                                       const float (&o)[Traits::kORegs],
                                       const float (&out_scale)[2], const float (&lse)[2]) {
    const int tid = static_cast<int>(threadIdx.x) % 128;
    const int lane = tid % 32;
    const int row = consumer * Traits::kRowsPerConsumer + (tid / 32) * 16 + lane / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row + 8 * h >= t.rows(p)) continue;
      const int64_t dst_row = static_cast<int64_t>(partial_row) + row + 8 * h;
      float* dst = p.batch.partial_o + dst_row * Traits::kHeadDimV + 2 * (lane % 4);
#pragma unroll
      for (int c = 0; c < Traits::kORegs / 4; ++c) {
        *reinterpret_cast<float2*>(dst + 8 * c) =
            make_float2(o[4 * c + 2 * h] * out_scale[h], o[4 * c + 2 * h + 1] * out_scale[h]);
      }
      if (lane % 4 == 0) p.batch.partial_lse[dst_row] = lse[h];
    }
    if constexpr (Traits::kOInQ) {
      if (t.n_blocks() > 0) ptx::mbarrier_arrive(sm.q_empty());
    }
  }

  // The LSE of this thread's two rows (tile rows `row`, row + 8), by the quad's first lane.
  __device__ static void store_lse(const FwdParams& p, const WorkTile& w, const TileInfo& t,
                                   int row, int lane, const float (&lse)[2]) {
    if (lane % 4 != 0) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row + 8 * h < t.rows(p)) {
        const RowAddress a = row_address(p, w, t, row + 8 * h);
        p.out.lse[w.batch * p.out.lse_batch_stride +
                  static_cast<int64_t>(t.row_q + a.q_pos) * p.out.lse_row_stride +
                  a.head * p.out.lse_head_stride] = lse[h];
      }
    }
  }

  // 16-byte chunks from the swizzled panels to global memory, valid rows only; kZeros: zeros,
  // shared memory untouched.
  template <bool kZeros>
  __device__ static void store_rows_direct(const FwdParams& p, const WorkTile& w, const TileInfo& t,
                                           uint32_t smem_o, int row_first, int rows_valid,
                                           int tid) {
    Elt* out = static_cast<Elt*>(p.out.o);
    store_panel_rows<Elt, Traits::kHeadDimV, kZeros>(
        smem_o, Traits::kOPanelStride, rows_valid, tid, 128, [&](int r) {
          const RowAddress a = row_address(p, w, t, row_first + r);
          return out + w.batch * p.out.o_batch_stride +
                 static_cast<int64_t>(t.row_q + a.q_pos) * p.out.o_row_stride +
                 a.head * p.out.o_head_stride;
        });
  }

  // Before the CTA exits: its last TMA stores must have completed.
  __device__ static void finish() {
    if (threadIdx.x % 128 == 0) ptx::tma_store_wait_all<0>();
  }
};

}  // namespace hopattn::kernels::fwd
