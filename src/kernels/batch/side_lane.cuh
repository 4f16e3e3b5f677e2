// The batch family's side lane: decode items of at most 8 rows (plan::kSideMaxRows) run on
// producer warps 2 and 3 while the consumer warpgroups run the CTA's prefill tiles, so that an SM
// streams a decode's KV from HBM during its tensor-core work instead of after it.
//
// Why: with one 227 KB CTA an SM, a decode item run as a consumer tile keeps the SM's tensor
// cores idle while it streams, and a prefill tile keeps HBM idle; a mixed step then costs the
// sum of both (docs/perf/NOTES.md, batch). Two producer warps are idle on the paged-TMA path
// (warp 0 issues Q's and K's boxes, warp 1 V's), and a decode of a few rows needs little
// math: S^T = K q^T and O^T = V^T P^T as mma.sync m16n8k16 tiles with the 16 keys of a block as
// M and the rows as N (8 columns), so a warp holds O^T of 8 rows in 4 registers a 16-feature
// tile. Each warp owns half of the features of O (16 registers at head dim 128; the producer
// warpgroup has 56) and both compute the block's S^T (8 + 8 cheap MMAs), which needs no exchange.
//
// Pipeline: a ring of kSideStages stages of 16-key blocks behind the fwd kernel's shared memory
// (rows padded by 16 bytes, so ldmatrix reads are conflict free with one address register a
// lane). Each of a block's 16 K rows (warp 2) and V rows (warp 3) is one bulk copy (cp.async.bulk,
// any page size) by the lane of its key, which read the key's page id one block ahead; the copies
// complete on the stage's full barrier. One named barrier of the 64 threads a block: both warps
// are then done with the stage the next copies overwrite. (A first version gathered 16-byte
// pieces by cp.async, 16 a thread a block, each with its own address chain: ~557 instructions a
// warp a block and 3-4 GB/s an SM, docs/perf/NOTES.md run set z.)
//
// Semantics are the consumers': the mask of kernels/fwd/mask.cuh (the item's key range, the
// window, bottom-right alignment), the softcap, the lazy running max of OnlineSoftmax, per-head
// KV scales (tile_scales), sinks on unsplit items, NaN propagation, fp32 partial rows for split
// items (batch_plan_layout.hpp). Rows of keys outside the item's range or past kv_len, and rows
// behind a bad page id, are zeros, as the gather writes them.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/batch/scheduler.cuh"
#include "kernels/batch/side_lane_traits.cuh"
#include "kernels/common/keys_as_m.cuh"
#include "kernels/common/math_constants.hpp"
#include "kernels/fwd/kernel.cuh"
#include "kernels/fwd/kv_loader.cuh"
#include "kernels/fwd/softmax.cuh"
#include "plan/batch_plan_layout.hpp"
#include "plan/batch_tiles.hpp"
#include "ptx/bulk_copy.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/fast_math.cuh"
#include "ptx/ldmatrix.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/mma_sync.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/shared_memory.cuh"

namespace hopattn::kernels::batch {

template <class Traits>
struct SideLane {
  using Elt = typename Traits::Elt;
  using G = SideGeometry<Traits::kHeadDim>;
  static constexpr int kD = Traits::kHeadDim;
  static constexpr int kStages = Traits::kSideStages;

  // A key's page for the copies: page id (-1: no key, copy zeros) and its page-list entry.
  struct PageRef {
    int page, index;
  };

  // What the block loop of an item keeps in registers (the rest is re-read from the item).
  struct Keys {
    int request, kv_head;
    int lo, hi;            // the item's keys [kv_begin, min(kv_end, kv_len))
    int key0;              // first key of block 0: lo rounded down to 16
    int blocks;            // 16-key blocks from key0 over [lo, hi)
    int full_lo, full_hi;  // keys every valid row of the item sees: blocks inside need no mask
  };

  // Lanes 0..15: the page of key `key0 + 16 b + lane` when it lies in [lo, hi) (b < blocks).
  __device__ static PageRef fetch(const FwdParams& p, const Keys& k, int b, int lane) {
    PageRef r{-1, 0};
    const int key = k.key0 + b * G::kKeys + lane;
    if (b < k.blocks && lane < G::kKeys && key >= k.lo && key < k.hi) {
      r.index = static_cast<int>(p.kv.page_div.divide(static_cast<uint32_t>(key)));
      r.page = fwd::KVLoader<Traits>::page_list(p, k.request)[r.index];
    }
    return r;
  }

  // Block n of the lane's sequence (an item's block b) into stage n % kStages: warp 2's lanes
  // 0..15 copy K rows, warp 3's V rows, one bulk copy (cp.async.bulk) a row from the page the
  // lane fetched, completing on the stage's full barrier (each warp's lane 0 arrives with its
  // rows' bytes). A row without a key (past the item's range) or behind a bad page id (noted in
  // the warp's note) is written as zeros by its lane before that arrival.
  __device__ static void issue(const FwdParams& p, uint32_t ring, uint64_t* bars, uint32_t n,
                               const PageRef& ref, const Keys& k, int b, int warp, int lane,
                               uint32_t note_at) {
    const uint32_t stage = n % kStages;
    uint64_t* const bar = bars + stage;
    const uint32_t dst = ring + stage * G::kStageBytes + warp * G::kBlockBytes +
                         static_cast<uint32_t>(lane) * G::kRowStride;
    const bool row = lane < G::kKeys;
    const bool bad = row && ref.page >= p.kv.num_pages;
    const bool valid = row && ref.page >= 0 && !bad;
    if (bad) {
      fwd::KVLoader<Traits>::note_bad_page(static_cast<int2*>(__cvta_shared_to_generic(note_at)),
                                           k.request, ref.page);
    }
    if (row && !valid) {
#pragma unroll
      for (int c = 0; c < G::kChunks; ++c) ptx::st_shared_v4(dst + 16 * c, make_uint4(0, 0, 0, 0));
    }
    __syncwarp();  // the zeros before lane 0's arrival (release) below
    const uint32_t rows = __popc(__ballot_sync(0xffffffffu, valid));
    if (lane == 0) ptx::mbarrier_arrive_expect_tx(bar, rows * G::kRowBytes);
    if (valid) {
      const fwd::PoolParams& pool = warp == 0 ? p.kv.k_pool : p.kv.v_pool;
      const uint32_t slot =
          static_cast<uint32_t>(k.key0 + b * G::kKeys + lane - ref.index * p.kv.page_size);
      const Elt* src = static_cast<const Elt*>(pool.base) +
                       static_cast<uint64_t>(ref.page) * pool.page_stride +
                       (slot * pool.slot_stride + k.kv_head * pool.head_stride);
      ptx::bulk_load(__cvta_shared_to_generic(dst), src, G::kRowBytes, bar);
    }
  }

  // Where the item's row n lives in q / out (mask.cuh row_address, the item seen as a tile whose
  // first position is row_begin / group: row_begin is a multiple of the group).
  __device__ static fwd::RowAddress row_at(const FwdParams& p, const plan::BatchWorkItem& item,
                                           int n) {
    fwd::WorkTile w;
    w.head = item_kv_head<false>(p.batch, item);
    fwd::TileInfo t;
    t.q_start = static_cast<int>(p.pack.pack_div.divide(static_cast<uint32_t>(item.row_begin)));
    return fwd::row_address(p, w, t, n);
  }

  // The keys [col_lo, col_hi) the item's rows 2 qd and 2 qd + 1 see (mask.cuh row_limits, within
  // [lo, hi)); a padding row (n >= rows) gets [lo, hi), which bounds nothing.
  __device__ static void row_limits(const FwdParams& p, const plan::BatchWorkItem& item,
                                    const Keys& k, int qd, int (&col_lo)[2], int (&col_hi)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int diag = row_at(p, item, 2 * qd + h).q_pos + item.kv_len - item.q_len;
      const bool valid = 2 * qd + h < item.row_end - item.row_begin;
      col_hi[h] = k.hi;
      if (valid && p.mask.window_right >= 0) col_hi[h] = min(k.hi, diag + p.mask.window_right + 1);
      col_lo[h] = k.lo;
      if (valid && p.mask.window_left >= 0) col_lo[h] = max(k.lo, diag - p.mask.window_left);
    }
  }

  // The CTA's kDecodeSide items, in list order, by threads 64..127 (warps 2 and 3).
  __device__ static void run(const FwdParams& p, const fwd::SharedPlan<Traits>& sm) {
    const int t = static_cast<int>(threadIdx.x) - 64;
    const uint32_t note_at = ptx::smem_address(sm.bad_page_note(2 + t / 32));
    const uint32_t side = ptx::smem_address(sm.base + Traits::kSideOffset);
    uint64_t* const bars = reinterpret_cast<uint64_t*>(sm.base + Traits::kSideBarOffset);
    if (t == 0) {
      for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(bars + s, 2);  // a warp's arrival each
      ptx::fence_mbarrier_init();
    }
    ptx::named_barrier_sync(fwd::kSideLane, G::kThreads);
    const int cta = cta_in_group<false>(p.batch);  // its group's copy of group 0's list of this CTA
    const int end = p.batch.cta_offsets[cta + 1];
    uint32_t seq = 0;  // blocks run so far: block n is in stage n % kStages, phase n / kStages
#pragma unroll 1
    for (int i = p.batch.cta_offsets[cta]; i < end; ++i) {
      if (p.batch.items[i].kind == static_cast<uint16_t>(plan::BatchTileKind::kDecodeSide)) {
        seq = run_item(p, i, side, bars, seq, t, note_at);
      }
    }
    __syncwarp();
    if (t % 32 == 0) fwd::KVLoader<Traits>::report_bad_page(p, sm.bad_page_note(2 + t / 32));
  }

  // q rows 0 .. rows - 1 of item i into q_smem (zeros past them); the caller commits.
  __device__ static void load_q(const FwdParams& p, const plan::BatchWorkItem& item,
                                uint32_t q_smem, int t) {
    const Elt* q = static_cast<const Elt*>(p.batch.q);
    const int rows = item.row_end - item.row_begin;
#pragma unroll
    for (int k = t; k < G::kRows * G::kChunks; k += G::kThreads) {
      const int r = k / G::kChunks, c = k % G::kChunks;
      const Elt* src = q;
      if (r < rows) {
        const fwd::RowAddress a = row_at(p, item, r);
        src = q + (item.q_start + a.q_pos) * p.batch.q_row_stride + a.head * p.batch.q_head_stride +
              c * 8;
      }
      ptx::cp_async_16(G::at(q_smem, r, c), src, r < rows ? 16 : 0);
    }
  }

  // One item: q rows, the KV blocks of [kv_begin, kv_end), the output rows.
  // Returns seq advanced by the item's blocks.
  __device__ static uint32_t run_item(const FwdParams& p, int i, uint32_t side, uint64_t* bars,
                                      uint32_t seq, int t, uint32_t note_at) {
    const int warp = t / 32, lane = t % 32, qd = lane % 4;
    const uint32_t q_smem = side;
    const uint32_t ring = side + G::kQBytes;
    Keys k;
    {
      const plan::BatchWorkItem& item = p.batch.items[i];
      load_q(p, item, q_smem, t);  // every thread's own pieces waited for here; the loop's
      ptx::cp_async_commit();      // first barrier shows them to the other warp
      ptx::cp_async_wait<0>();
      k.request = item.request;
      k.kv_head = item_kv_head<false>(p.batch, item);
      k.lo = item.kv_begin;
      k.hi = min(item.kv_end, item.kv_len);
      k.key0 = k.lo & ~(G::kKeys - 1);
      k.blocks = k.hi > k.lo ? (k.hi - k.key0 + G::kKeys - 1) / G::kKeys : 0;
      int col_lo[2], col_hi[2];
      row_limits(p, item, k, qd, col_lo, col_hi);
      int full_lo = max(col_lo[0], col_lo[1]), full_hi = min(col_hi[0], col_hi[1]);
#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {  // over the quad's rows (lanes of one g)
        full_lo = max(full_lo, __shfl_xor_sync(0xffffffffu, full_lo, x));
        full_hi = min(full_hi, __shfl_xor_sync(0xffffffffu, full_hi, x));
      }
      k.full_lo = full_lo;
      k.full_hi = full_hi;
    }

    fwd::WorkTile w;
    w.head = k.kv_head;
    const fwd::TileScales scales = fwd::tile_scales<true>(p, w);
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    float o[G::kWarpTiles][4];
#pragma unroll
    for (int m = 0; m < G::kWarpTiles; ++m) o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.f;

    PageRef next = fetch(p, k, 0, lane);
#pragma unroll 1
    for (int s = 0; s < kStages - 1; ++s) {
      const PageRef cur = next;
      next = fetch(p, k, s + 1, lane);
      if (s < k.blocks) issue(p, ring, bars, seq + s, cur, k, s, warp, lane, note_at);
    }
#pragma unroll 1
    for (int b = 0; b < k.blocks; ++b) {
      const uint32_t n = seq + b;
      ptx::mbarrier_wait_parity(bars + n % kStages, (n / kStages) & 1u);
      // Both warps are past block b - 1, whose stage the next copies overwrite.
      ptx::named_barrier_sync(fwd::kSideLane, G::kThreads);
      const PageRef cur = next;
      next = fetch(p, k, b + kStages, lane);
      if (b + kStages - 1 < k.blocks) {
        issue(p, ring, bars, n + kStages - 1, cur, k, b + kStages - 1, warp, lane, note_at);
      }
      attend(p, i, k, ring + (n % kStages) * G::kStageBytes, q_smem, k.key0 + b * G::kKeys, scales,
             warp, lane, row_max, row_sum, o);
    }
    ptx::named_barrier_sync(fwd::kSideLane, G::kThreads);  // q and the ring are read: reusable
    finish_item(p, p.batch.items[i], q_smem, t, row_max, row_sum, o);
    return seq + static_cast<uint32_t>(k.blocks);
  }

  // The item's rows (OnlineSoftmax's rule: the sink counted on unsplit items, NaN kept), to
  // out / lse or to its partial rows.
  __device__ static void finish_item(const FwdParams& p, const plan::BatchWorkItem& item,
                                     uint32_t q_smem, int t, const float (&row_max)[2],
                                     const float (&row_sum)[2],
                                     const float (&o)[G::kWarpTiles][4]) {
    const int warp = t / 32, lane = t % 32, qd = lane % 4;
    const int rows = item.row_end - item.row_begin;
    float sums[2] = {keys_sum(row_sum[0]), keys_sum(row_sum[1])};
    float sink_log2[2] = {-INFINITY, -INFINITY};
    const bool split = item.partial_row >= 0;
    if (p.softmax.sinks != nullptr && !split) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (2 * qd + h < rows) {
          sink_log2[h] =
              p.softmax.sinks[row_at(p, item, 2 * qd + h).head * p.softmax.sinks_stride] * kLog2e;
        }
      }
    }
    fwd::WorkTile w;
    w.head = item_kv_head<false>(p.batch, item);
    const fwd::TileScales scales = fwd::tile_scales<true>(p, w);
    fwd::OnlineSoftmax<4> softmax(scales.scale_log2);
    softmax.row_max[0] = row_max[0];
    softmax.row_max[1] = row_max[1];
    float out_scale[2], lse[2];
    softmax.finalize_sums(sums, sink_log2, out_scale, lse);
    out_scale[0] *= scales.v;
    out_scale[1] *= scales.v;
    if (split) {
      store_partial(p, item, rows, warp, lane, o, out_scale, lse);
    } else {
      store_out(p, item, rows, q_smem, t, o, out_scale, lse);
    }
  }

  // One 16-key block from the stage at `stage` (K rows, then V rows): S^T = K q^T, the mask and
  // softcap, the online softmax, O^T += V^T P^T over this warp's feature tiles.
  // `scales`: the item's (tile_scales: a per-head k scale is in the logits' scale).
  __device__ static void attend(const FwdParams& p, int i, const Keys& k, uint32_t stage,
                                uint32_t q_smem, int key0, const fwd::TileScales& scales, int warp,
                                int lane, float (&row_max)[2], float (&row_sum)[2],
                                float (&o)[G::kWarpTiles][4]) {
    const float scale_log2 = scales.scale_log2, softcap_scale = scales.softcap_scale;
    const int g = lane / 4;
    // s[e]: key g + 8 (e >> 1), row 2 qd + (e & 1).
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    {
      // ldmatrix matrix j = lane / 8 takes its rows from lanes 8j .. 8j + 7.
      const uint32_t q_at = G::at(q_smem, lane & 7, lane >> 3);
      const uint32_t k_at = G::at(stage, ((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4);
      // Two accumulators (even and odd k-steps), so that the MMAs form two chains of half the
      // length.
      float s1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int m = 0; m < G::kKSteps / 2; ++m) {
        uint32_t bq[4], a[4], a1[4];
        ptx::ldmatrix_x4(bq, q_at + 64 * m);  // chunks 4m .. 4m + 3: two k-steps' b0, b1
        ptx::ldmatrix_x4(a, k_at + 64 * m);   // keys 0-7 | 8-15 x chunks 4m | 4m + 1
        ptx::ldmatrix_x4(a1, k_at + 64 * m + 32);
        ptx::mma_m16n8k16<Elt>(s, a, bq[0], bq[1]);
        ptx::mma_m16n8k16<Elt>(s1, a1, bq[2], bq[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) s[e] += s1[e];
    }
    if (softcap_scale != 0.f) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[e] = ptx::tanh_approx(s[e] * softcap_scale);
    }
    if (key0 < k.full_lo || key0 + G::kKeys > k.full_hi) {  // warp-uniform
      int col_lo[2], col_hi[2];
      row_limits(p, p.batch.items[i], k, lane % 4, col_lo, col_hi);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + g + 8 * (e >> 1), h = e & 1;
        if (key < col_lo[h] || key >= col_hi[h]) s[e] = -INFINITY;
      }
    }
    float correction[2];
    if (keys_softmax_lazy(s, row_max, row_sum, correction, scale_log2)) {
#pragma unroll
      for (int m = 0; m < G::kWarpTiles; ++m) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[m][e] *= correction[e & 1];
      }
    }
    uint32_t b0, b1;
    keys_p_fragments<Elt>(s, b0, b1);
    // V^T's A fragments: matrices (keys 0-7 | 8-15) x (features +0 | +8), transposed.
    const uint32_t v_at = G::at(stage + G::kBlockBytes, (lane >> 4) * 8 + (lane & 7),
                                2 * warp * G::kWarpTiles + ((lane >> 3) & 1));
#pragma unroll
    for (int m = 0; m < G::kWarpTiles; ++m) {
      uint32_t a[4];
      ptx::ldmatrix_x4_trans(a, v_at + 32 * m);
      ptx::mma_m16n8k16<Elt>(o[m], a, b0, b1);
    }
  }

  // Unsplit: O rows through the q rows' shared memory (free after the last block) as Elt, then
  // 16-byte stores of the valid rows; the LSE by warp 2's lanes 0..3.
  __device__ static void store_out(const FwdParams& p, const plan::BatchWorkItem& item, int rows,
                                   uint32_t q_smem, int t, const float (&o)[G::kWarpTiles][4],
                                   const float (&out_scale)[2], const float (&lse)[2]) {
    const int warp = t / 32, lane = t % 32, g = lane / 4, qd = lane % 4;
#pragma unroll
    for (int m = 0; m < G::kWarpTiles; ++m) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = 16 * (warp * G::kWarpTiles + m) + g + 8 * (e >> 1), n = 2 * qd + (e & 1);
        const uint32_t bits = ptx::pack2<Elt>(o[m][e] * out_scale[e & 1], 0.f) & 0xffffu;
        asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(G::at(q_smem, n, d / 8) + (d % 8) * 2),
                     "h"(static_cast<uint16_t>(bits))
                     : "memory");
      }
    }
    ptx::named_barrier_sync(fwd::kSideLane, G::kThreads);
    Elt* out = static_cast<Elt*>(p.out.o);
#pragma unroll 1
    for (int k = t; k < rows * G::kChunks; k += G::kThreads) {
      const int r = k / G::kChunks, c = k % G::kChunks;
      const fwd::RowAddress a = row_at(p, item, r);
      Elt* dst = out + item.request * p.out.o_batch_stride +
                 static_cast<int64_t>(item.q_start + a.q_pos) * p.out.o_row_stride +
                 a.head * p.out.o_head_stride + c * 8;
      *reinterpret_cast<uint4*>(dst) = ptx::ld_shared_v4(G::at(q_smem, r, c));
    }
    if (warp == 0 && g == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int n = 2 * qd + h;
        if (n < rows) {
          const fwd::RowAddress a = row_at(p, item, n);
          p.out.lse[item.request * p.out.lse_batch_stride +
                    static_cast<int64_t>(item.q_start + a.q_pos) * p.out.lse_row_stride +
                    a.head * p.out.lse_head_stride] = lse[h];
        }
      }
    }
    ptx::named_barrier_sync(fwd::kSideLane, G::kThreads);  // q's bytes are read: the next item's
  }

  // Split: normalized fp32 O rows and their LSE to partial rows partial_row + n (the merge pass
  // adds the sink), straight from registers.
  __device__ static void store_partial(const FwdParams& p, const plan::BatchWorkItem& item,
                                       int rows, int warp, int lane,
                                       const float (&o)[G::kWarpTiles][4],
                                       const float (&out_scale)[2], const float (&lse)[2]) {
    const int g = lane / 4, qd = lane % 4;
    const int partial_row = item_partial_row<false>(p.batch, item);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = 2 * qd + h;
      if (n >= rows) continue;
      float* dst = p.batch.partial_o + (static_cast<int64_t>(partial_row) + n) * kD;
#pragma unroll
      for (int m = 0; m < G::kWarpTiles; ++m) {
        const int d = 16 * (warp * G::kWarpTiles + m) + g;
        dst[d] = o[m][h] * out_scale[h];
        dst[d + 8] = o[m][2 + h] * out_scale[h];
      }
      if (warp == 0 && g == 0) p.batch.partial_lse[partial_row + n] = lse[h];
    }
  }
};

// The side-lane kernel's scheduler: the work lists without kDecodeSide items for the producer
// warps 0 and 1 and the consumers, and SideLane::run for producer warps 2 and 3.
class SideLaneScheduler : public WorkListSchedulerT<true> {
 public:
  using WorkListSchedulerT<true>::WorkListSchedulerT;

  template <class Traits>
  __device__ static void run_side_lane(const FwdParams& p, const fwd::SharedPlan<Traits>& sm) {
    SideLane<Traits>::run(p, sm);
  }
};

}  // namespace hopattn::kernels::batch
