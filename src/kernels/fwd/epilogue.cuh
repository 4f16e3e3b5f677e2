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
#pragma once

#include <cmath>

#include "kernels/fwd/mask.cuh"
#include "kernels/fwd/traits.cuh"
#include "ptx/fence.cuh"
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

    // The previous tile's TMA store must be done reading the staging buffer.
    if (tid == 0) ptx::tma_store_wait_read<0>();
    ptx::named_barrier_sync(barrier, 128);

    // Register i holds column 8 * (i >> 2) + 2 * (lane % 4) + (i & 1) of row half (i >> 1) & 1.
    // Columns 8c..8c+7 of a row are the 16-B chunk c % 8 of panel c / 8, stored at chunk
    // (c % 8) ^ (row % 8); both rows of a thread have row % 8 = lane / 4. One 4-byte pair per
    // store: a warp's 32 stores of one (c, half) hit 8 rows in 8 distinct chunks, all 32 banks
    // once. The thread's address parts go through opaque() so that the compiler computes the
    // addresses here rather than keeping all of them live (and spilled) through the mainloop.
    const uint32_t lane_bits = ptx::opaque(static_cast<uint32_t>(lane));
    const uint32_t row_addr = smem_o_addr +
                              ((tid / 32) * 16 + (lane_bits >> 2)) * Traits::kRowBytes +
                              (lane_bits & 3u) * 4u;
    const uint32_t swizzle = lane_bits >> 2;  // row % 8
#pragma unroll
    for (int c = 0; c < Traits::kORegs / 4; ++c) {
      const uint32_t chunk_addr = row_addr + (c / 8) * Traits::kOPanelBytes +
                                  ((static_cast<uint32_t>(c % 8) ^ swizzle) << 4);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t packed =
            ptx::pack2<Elt>(o[4 * c + 2 * h] * out_scale[h], o[4 * c + 2 * h + 1] * out_scale[h]);
        ptx::st_shared_u32(chunk_addr + h * 8 * Traits::kRowBytes, packed);
      }
    }
    ptx::fence_proxy_async_shared();  // generic-proxy writes, read next by the TMA engine
    ptx::named_barrier_sync(barrier, 128);

    const int row_first = consumer * Traits::kRowsPerConsumer;  // tile row
    const int rows_valid = min(Traits::kRowsPerConsumer, t.rows(p) - row_first);
    if (rows_valid > 0) {
      const bool tma = p.pack.o_by_tma &&
                       (p.seq.cu_seqlens_q == nullptr || rows_valid == Traits::kRowsPerConsumer);
      if (tma) {
        if (tid == 0) {
          // Box (64 columns, pack heads, 64 / pack positions); pack divides 64 here.
          const int q_pos = row_address(p, w, t, row_first).q_pos;
#pragma unroll
          for (int i = 0; i < kPanels; ++i) {
            ptx::tma_store_4d(&p.tm_o, smem_o + i * Traits::kOPanelBytes, i * Traits::kPanelCols,
                              w.head * p.pack.pack, t.row_q + q_pos, t.batch_coord);
          }
          ptx::tma_store_commit();
        }
      } else {
        store_rows_direct(p, w, t, smem_o_addr, row_first, rows_valid, tid);
      }
    }

    if (lane % 4 == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_first + warp_row + 8 * h;
        if (row < t.rows(p)) {
          const RowAddress a = row_address(p, w, t, row);
          p.out.lse[w.batch * p.out.lse_batch_stride +
                    static_cast<int64_t>(t.row_q + a.q_pos) * p.out.lse_row_stride +
                    a.head * p.out.lse_head_stride] = lse[h];
        }
      }
    }
  }

  // 16-byte chunks from the swizzled panels to global memory, valid rows only.
  __device__ static void store_rows_direct(const FwdParams& p, const WorkTile& w, const TileInfo& t,
                                           uint32_t smem_o, int row_first, int rows_valid,
                                           int tid) {
    constexpr int kChunksPerRow = Traits::kHeadDimV * 2 / 16;
    constexpr int kChunksPerPanelRow = Traits::kRowBytes / 16;
    Elt* out = static_cast<Elt*>(p.out.o);
    for (int idx = tid; idx < rows_valid * kChunksPerRow; idx += 128) {
      const int r = idx / kChunksPerRow;
      const int chunk = idx % kChunksPerRow;
      const int panel = chunk / kChunksPerPanelRow;
      const int in_row = chunk % kChunksPerPanelRow;
      const uint4 v = ptx::ld_shared_v4(smem_o + panel * Traits::kOPanelBytes +
                                        r * Traits::kRowBytes + ((in_row ^ (r % 8)) * 16));
      const RowAddress a = row_address(p, w, t, row_first + r);
      const int64_t dst = w.batch * p.out.o_batch_stride +
                          static_cast<int64_t>(t.row_q + a.q_pos) * p.out.o_row_stride +
                          a.head * p.out.o_head_stride + chunk * 8;
      *reinterpret_cast<uint4*>(out + dst) = v;
    }
  }

  // Before the CTA exits: its last TMA stores must have completed.
  __device__ static void finish() {
    if (threadIdx.x % 128 == 0) ptx::tma_store_wait_all<0>();
  }
};

}  // namespace hopattn::kernels::fwd
