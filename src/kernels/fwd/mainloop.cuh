// Mainloop of the fwd kernel: the producer's TMA loads of one work tile, and one consumer
// warpgroup's GEMMs and online softmax over the tile's KV blocks.
//
// Pipeline (per CTA, counters never reset between tiles): Q has one buffer guarded by q_full
// (TMA, 1 arrival + bytes) / q_empty (256 consumer threads, once a tile with KV blocks: after
// their last S GEMM, or with Traits::kOInQ from the epilogue once O staged over Q has been
// read out; tiles without KV blocks load no Q and release nothing); K and V each have a ring of
// kStages buffers with full (TMA) / empty (256 consumer threads) barriers. KV block n of a tile
// goes to stage it % kStages for the CTA-wide block counter `it`, K and V of one block in the same
// stage.
//
// Consumer schedule for KV blocks n_max-1 down to n_min (the masked blocks come first):
//   S = Q K[n_max-1]^T; softmax; P = 16-bit(S)
//   for each further block n:   S = Q K[n]^T, O *= the last update's factors, O += P V[n+1]
//                               issued in one turn (the rescale runs while S is on the tensor
//                               cores), then softmax(S) runs while O += P V still is
//   O *= the last factors; O += P V[n_min]
// and each group of GEMM issues is one turn of the ring of consumer warpgroups (named barriers
// kGemmTurn0 + c): while one warpgroup issues GEMMs the others do their softmax.
// A warpgroup without a row of the tile takes its turns empty (compute_rows<kIdle>).
#pragma once

#include <cmath>

#include "kernels/fwd/kv_loader.cuh"
#include "kernels/fwd/mask.cuh"
#include "kernels/fwd/softmax.cuh"
#include "kernels/fwd/traits.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"

namespace hopattn::kernels::fwd {

using ptx::kHangTimeoutNs;

// ptx::mbarrier_wait_or_trap for the producer warpgroup (24 registers): the clock is kept in units
// of 1024 ns in 32 bits (wrapping after 73 minutes), one register instead of two.
inline constexpr uint32_t kHangTimeoutUnits = kHangTimeoutNs >> 10;

__device__ __forceinline__ void producer_wait(uint64_t* bar, uint32_t parity) {
  if (ptx::mbarrier_try_wait_parity(bar, parity)) return;
  const uint32_t start = static_cast<uint32_t>(ptx::global_timer_ns() >> 10);
  while (!ptx::mbarrier_try_wait_parity(bar, parity)) {
    if (static_cast<uint32_t>(ptx::global_timer_ns() >> 10) - start > kHangTimeoutUnits) __trap();
  }
}

template <class Traits>
struct FwdMainloop {
  using Elt = typename Traits::Elt;
  using Pipeline = ptx::PipelineState<Traits::kStages>;
  static constexpr int kConsumerThreads = Traits::kConsumerThreads;
  // The lazy softmax base (OnlineSoftmax::update_lazy) and the warp-level skip of O's rescale
  // for O tiles of 64+ registers a thread (value head dims 128 and 256): there it saved 2-5%
  // (hd256 causal, batch step (a)); at hd64 the skip's vote cost more than its 32 multiplies
  // (2% slower, H200, docs/perf/NOTES.md).
  static constexpr bool kLazySoftmax = Traits::kORegs >= 64;

  // ---------------------------------------------------------------------------- producer
  using Loader = KVLoader<Traits>;
  static constexpr int kQKPanels = Traits::kHeadDim / Traits::kPanelCols;
  static constexpr int kVPanels = Traits::kHeadDimV / Traits::kPanelCols;

  struct ProducerState {
    Pipeline kv;
    uint32_t q_phase = 0;
  };

  // Issued by the producer thread: K of the tile's first (highest) KV block, Q, V of that block,
  // then K and V of each further block. K goes first so that it streams in while the consumers
  // still finish the previous tile and hold Q. kSource = kPagedGather: K and V blocks become
  // gather jobs for warps 1..3 (kv_loader.cuh); Q is still a TMA load. Each source is its own
  // instantiation, so that each path fits the producer's 24 registers on its own. kWithV false
  // (kPagedTma): Q and K only, V's boxes come from producer warp 1 (load_tile_v).
  template <KVSource kSource, bool kWithV = true>
  __device__ static void load_tile(const FwdParams& p, const SharedPlan<Traits>& sm,
                                   const WorkTile& w, const TileInfo& t, ProducerState& st) {
    constexpr bool kGather = kSource == KVSource::kPagedGather;
    const typename Loader::Source src = Loader::template source<kSource>(p, w, t);
    // The flag the widening warps read in each job (kVWidenedByConsumer): consumer 1 has no rows
    // here, so it widens V (widen_v_or_arrive).
    const int v_flag =
        kSource == KVSource::kPagedTmaWiden && Traits::kConsumerWidensV && consumer_idle(p, t, 1)
            ? kVWidenedByConsumer
            : 0;
    int n = t.n_block_max - 1;
    // Paged TMA: this lane's box of block n (`box`) and of the block after it (`next`), read
    // one block ahead (KVLoader::read_box).
    constexpr bool kAhead = kSource == KVSource::kPagedTma || kSource == KVSource::kPagedTmaWiden;
    typename Loader::PagedBox box, next;
    if constexpr (kAhead) box = Loader::read_box(p, src, n);
    load_k<kSource>(p, sm, src, n, st.kv, v_flag, box);
    if constexpr (kAhead) {
      if (n > t.n_block_min) next = Loader::read_box(p, src, n - 1);
    }
    producer_wait(sm.q_empty(), st.q_phase ^ 1);
    // One box per panel: (64 columns, pack heads, positions) from head w.head * pack lands as
    // rows (q_pos - q_start) * pack + h (traits.cuh, PackParams); without packing, 128 rows.
    // Paged calls have a varlen q (batch coordinate 0): one register less to keep.
    if (leads<kSource>()) {
      ptx::mbarrier_arrive_expect_tx(sm.q_full(), p.pack.q_bytes);
      const int q_batch = kSource == KVSource::kContiguous ? t.batch_coord : 0;
#pragma unroll
      for (int i = 0; i < kQKPanels; ++i) {
        ptx::tma_load_4d(sm.q() + i * Traits::kQPanelBytes, &p.tm_q, sm.q_full(),
                         i * Traits::kPanelCols, w.head * p.pack.pack, t.row_q + t.q_start,
                         q_batch);
      }
    }
    if (!kGather && kWithV) load_v<kSource>(p, sm, src, n, st.kv, box);
    st.kv.advance();
    for (--n; n >= t.n_block_min; --n) {
      if constexpr (kAhead) box = next;
      load_k<kSource>(p, sm, src, n, st.kv, v_flag, box);
      if constexpr (kAhead) {
        if (n > t.n_block_min) next = Loader::read_box(p, src, n - 1);
      }
      if (!kGather && kWithV) load_v<kSource>(p, sm, src, n, st.kv, box);
      st.kv.advance();
    }
    st.q_phase ^= 1;
  }

  // kPagedTma, producer warp 1: V of every KV block of the tile, in load_tile's order, each page
  // id read one block ahead and checked for the report (bad_page_note(1)). With pages of 16 a
  // 128-key block is 32 boxes, which one warp issues one lane at a time (~45 cycles a box: the
  // lanes' coordinates go to uniform registers in turn); K's 16 on warp 0 and V's 16 here halve
  // the issue time of a block.
  __device__ static void load_tile_v(const FwdParams& p, const SharedPlan<Traits>& sm,
                                     const WorkTile& w, const TileInfo& t, Pipeline& kv) {
    const typename Loader::Source src = Loader::template source<KVSource::kPagedTma>(p, w, t);
    int n = t.n_block_max - 1;
    typename Loader::PagedBox box = Loader::read_box(p, src, n), next;
    for (; n >= t.n_block_min; --n) {
      if (n > t.n_block_min) next = Loader::read_box(p, src, n - 1);
      Loader::audit_box(p, src, n, box, sm.bad_page_note(1));
      load_v<KVSource::kPagedTma>(p, sm, src, n, kv, box);
      kv.advance();
      box = next;
    }
  }

  // kPagedTma runs on all of warp 0 (Q and K) and of warp 1 (V), each lane issuing one page box
  // (kv_loader.cuh): lane 0 of each alone raises its barriers' byte counts (and warp 0's loads
  // Q); every lane waits on the empty barriers. A full barrier's phase completes only after lane
  // 0's arrival, so other lanes' bytes landing first are safe (the transaction count may dip
  // below zero until then). Other sources: one thread.
  template <KVSource kSource>
  __device__ static bool leads() {
    return (kSource != KVSource::kPagedTma && kSource != KVSource::kPagedTmaWiden) ||
           ptx::lane_id() == 0;
  }

  // kPagedTmaWiden: K or V codes of block n (kCols fp8 columns) by TMA into `stage`, landing on
  // `raw`, where warps 1..3 wait for them (gather_jobs). The stage's last widened values were
  // generic-proxy stores: a proxy fence orders them before TMA (async proxy) overwrites them.
  template <int kCols>
  __device__ static void load_codes(const FwdParams& p, const CUtensorMap* map, uint8_t* stage,
                                    uint64_t* raw, const typename Loader::Source& src, int n,
                                    const SharedPlan<Traits>& sm,
                                    const typename Loader::PagedBox& box) {
    using L = typename Loader::template CodeLayout<kCols>;
    ptx::fence_proxy_async_shared();
    if (ptx::lane_id() == 0) ptx::mbarrier_arrive_expect_tx(raw, Traits::kBlockN * kCols);
    Loader::template tma_block<KVSource::kPagedTmaWiden, L::kRawSlots, L::kPanels - L::kRawSlots,
                               128>(p, map, stage, raw, src, n, sm.bad_page_note(0), box);
  }

  // K of block n by TMA, or (kPagedGather) its gather job, once the stage is free. v_flag:
  // kVWidenedByConsumer or 0 (kPagedTmaWiden's jobs).
  template <KVSource kSource>
  __device__ static void load_k(const FwdParams& p, const SharedPlan<Traits>& sm,
                                const typename Loader::Source& src, int n, const Pipeline& kv,
                                int v_flag, const typename Loader::PagedBox& box) {
    const uint32_t s = kv.stage();
    producer_wait(sm.k_empty(s), kv.phase() ^ 1);
    if constexpr (kSource == KVSource::kPagedGather) {
      *sm.job(s) = GatherJob{src.batch, src.seqlen_k, src.kv_head, n};
      ptx::mbarrier_arrive(sm.job_full(s));  // release: the job's fields before the arrival
    } else if constexpr (kSource == KVSource::kPagedTmaWiden) {
      load_codes<Traits::kHeadDim>(p, &p.tm_k, sm.k(s), sm.k_raw(s), src, n, sm, box);
      if (ptx::lane_id() == 0) {  // the widening warps take the block in job order
        *sm.job(s) = GatherJob{src.batch, src.seqlen_k, src.kv_head | v_flag, n};
        ptx::mbarrier_arrive(sm.job_full(s));
      }
    } else {
      if (leads<kSource>()) ptx::mbarrier_arrive_expect_tx(sm.k_full(s), Traits::kKStageBytes);
      Loader::template tma_block<kSource, kQKPanels>(p, &p.tm_k, sm.k(s), sm.k_full(s), src, n,
                                                     sm.bad_page_note(0), box);
    }
  }

  template <KVSource kSource>
  __device__ static void load_v(const FwdParams& p, const SharedPlan<Traits>& sm,
                                const typename Loader::Source& src, int n, const Pipeline& kv,
                                const typename Loader::PagedBox& box) {
    const uint32_t s = kv.stage();
    producer_wait(sm.v_empty(s), kv.phase() ^ 1);
    if constexpr (kSource == KVSource::kPagedTmaWiden) {
      load_codes<Traits::kHeadDimV>(p, &p.tm_v, sm.v(s), sm.v_raw(s), src, n, sm, box);
    } else {
      if (leads<kSource>()) ptx::mbarrier_arrive_expect_tx(sm.v_full(s), Traits::kVStageBytes);
      Loader::template tma_block<kSource, kVPanels>(p, &p.tm_v, sm.v(s), sm.v_full(s), src, n,
                                                    sm.bad_page_note(0), box);
    }
  }

  // Producer thread (kPagedTmaWiden: warp 0, lane 0 writing), after its last tile: a job with
  // n_block = -1 stops warps 1..3 (published like any job, once its slot's stage is free).
  __device__ static void finish_jobs(const SharedPlan<Traits>& sm, const ProducerState& st) {
    const uint32_t s = st.kv.stage();
    producer_wait(sm.k_empty(s), st.kv.phase() ^ 1);
    if (Traits::kTmaCodes && ptx::lane_id() != 0) return;
    *sm.job(s) = GatherJob{0, 0, 0, -1};
    ptx::mbarrier_arrive(sm.job_full(s));
  }

  // One 16-byte shared load by 32-bit address (a generic pointer would hold a register more).
  __device__ static GatherJob read_job(const SharedPlan<Traits>& sm, uint32_t s) {
    const uint4 a = ptx::ld_shared_v4(ptx::smem_address(sm.job(s)));
    return GatherJob{static_cast<int>(a.x), static_cast<int>(a.y), static_cast<int>(a.z),
                     static_cast<int>(a.w)};
  }

  // Producer warps 1..3 (tid 0..95), gather mode: every job's K block, then its V block, in the
  // order the producer thread published them.
  __device__ static void gather_jobs(const FwdParams& p, const SharedPlan<Traits>& sm,
                                     uint32_t tid) {
    int2* const note = sm.bad_page_note(1 + static_cast<int>(tid) / 32);
    Pipeline kv;
    for (;;) {
      const uint32_t s = kv.stage();
      producer_wait(sm.job_full(s), kv.phase());
      const GatherJob job = read_job(sm, s);
      if (job.n_block < 0) break;
      const uint32_t k_stage = ptx::smem_address(sm.k(s)), v_stage = ptx::smem_address(sm.v(s));
      if constexpr (Traits::kFp8KV) {
        if (p.kv.source == KVSource::kPagedTmaWiden) {  // the codes come by TMA (load_codes)
          producer_wait(sm.k_raw(s), kv.phase());
          Loader::template widen_codes<Traits::kHeadDim>(k_stage, sm.k_full(s), tid);
          if (Traits::kConsumerWidensV && (job.kv_head & kVWidenedByConsumer) != 0) {
            ptx::mbarrier_arrive(sm.v_full(s));  // consumer 1 widens V (widen_v_or_arrive)
          } else {
            producer_wait(sm.v_raw(s), kv.phase());
            Loader::template widen_codes<Traits::kHeadDimV>(v_stage, sm.v_full(s), tid);
          }
          kv.advance();
          continue;
        }
        // K's and V's codes in flight together (two cp.async groups), then each widened.
        Loader::template copy_codes<Traits::kHeadDim>(p, p.kv.k_pool, k_stage, job, tid, note);
        producer_wait(sm.v_empty(s), kv.phase() ^ 1);
        Loader::template copy_codes<Traits::kHeadDimV>(p, p.kv.v_pool, v_stage, job, tid, note);
        ptx::cp_async_wait<1>();
        Loader::template widen_codes<Traits::kHeadDim>(k_stage, sm.k_full(s), tid);
        ptx::cp_async_wait<0>();
        Loader::template widen_codes<Traits::kHeadDimV>(v_stage, sm.v_full(s), tid);
      } else {
        const int* const ids = Loader::block_page_ids(p, job, sm.page_ids(s), tid);
        Loader::template gather_block<Traits::kHeadDim>(p, p.kv.k_pool, k_stage, sm.k_full(s), job,
                                                        ids, tid, note);
        producer_wait(sm.v_empty(s), kv.phase() ^ 1);
        Loader::template gather_block<Traits::kHeadDimV>(p, p.kv.v_pool, v_stage, sm.v_full(s), job,
                                                         ids, tid, note);
      }
      kv.advance();
    }
    ptx::cp_async_wait<0>();  // no copy of this thread's still in flight when it leaves
    __syncwarp();
    if (tid % 32 == 0) Loader::report_bad_page(p, note);
  }

  // ---------------------------------------------------------------------------- consumer
  struct ConsumerState {
    Pipeline kv;
    uint32_t q_phase = 0;
  };

  using STile = float[Traits::kSRegs];
  using OTile = float[Traits::kORegs];
  using PFragments = uint32_t[Traits::kPSteps][4];

  // S = Q K^T over the head dim: k16 step j reads 16 columns of panel j / 4 of Q and K.
  __device__ static void issue_qk(STile& s, uint64_t q_desc, uint64_t k_desc) {
#pragma unroll
    for (int j = 0; j < Traits::kQKSteps; ++j) {
      const uint32_t offset_q = (j / 4) * Traits::kQPanelBytes + (j % 4) * 32;
      const uint32_t offset_k = (j / 4) * Traits::kKVPanelBytes + (j % 4) * 32;
      ptx::wgmma_ss<Traits::kBlockN, Elt, 0, 0>(s, ptx::desc_advance(q_desc, offset_q),
                                                ptx::desc_advance(k_desc, offset_k),
                                                j > 0 ? 1u : 0u);
    }
  }

  // O += P V over the KV block: k16 step j reads keys 16j..16j+15 = 2048 bytes further into V.
  __device__ static void issue_pv(OTile& o, const PFragments& pf, uint64_t v_desc) {
#pragma unroll
    for (int j = 0; j < Traits::kPSteps; ++j) {
      ptx::wgmma_rs<Traits::kHeadDimV, Elt, 1>(o, pf[j], ptx::desc_advance(v_desc, 2048 * j), 1u);
    }
  }

  // The accumulator of a 64x16 block is already in A-fragment order: P for k16 step j is
  // s[8j .. 8j+7] packed in pairs.
  __device__ static void convert_p(const STile& s, PFragments& pf) {
#pragma unroll
    for (int j = 0; j < Traits::kPSteps; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pf[j][r] = ptx::pack2<Elt>(s[8 * j + 2 * r], s[8 * j + 2 * r + 1]);
    }
  }

  __device__ static void update_softmax(OnlineSoftmax<Traits::kSRegs>& softmax, STile& s,
                                        float (&correction)[2]) {
    if constexpr (kLazySoftmax) {
      softmax.update_lazy(s, correction);
    } else {
      softmax.update(s, correction);
    }
  }

  // O *= the factors of the last softmax update (its new row maxima): O's last P V must have
  // completed, and the next one is issued after. With the lazy base, skipped by a warp whose
  // factors are all exactly 1 (the base rarely moves; a product by 1 is exact, so skipping it
  // changes nothing).
  __device__ static void rescale_o(OTile& o, const float (&correction)[2]) {
    if (!kLazySoftmax || OnlineSoftmax<Traits::kSRegs>::must_rescale(correction)) {
#pragma unroll
      for (int i = 0; i < Traits::kORegs; ++i) o[i] *= correction[(i >> 1) & 1];
    }
  }

  __device__ static void fence_all(STile& s, OTile& o, PFragments& pf) {
    ptx::fence_operands(s);
    ptx::fence_operands(o);
#pragma unroll
    for (int j = 0; j < Traits::kPSteps; ++j) ptx::fence_operands(pf[j]);
  }

  // One GEMM group (`issue`) issued and waited for at once, `result` its accumulator: the split
  // path (compute_split) keeps no GEMM in flight across its steps.
  template <class Result, class Issue>
  __device__ static void gemm_and_wait(STile& s, OTile& o, PFragments& pf, Result& result,
                                       Issue&& issue) {
    fence_all(s, o, pf);
    ptx::wgmma_fence();
    issue();
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(result);
  }

  // What a consumer thread's GEMMs and masks read on a tile: the limits of its two rows (rows g
  // and g + 8 of its warp's 16 in the accumulator layout, from tile row `first_row`), Q's
  // descriptor at that row, and K's and V's of a stage.
  struct TileOperands {
    RowLimits rows[2];
    uint64_t q_desc, k_desc0, v_desc0;
    __device__ TileOperands(const FwdParams& p, const SharedPlan<Traits>& sm, const WorkTile& w,
                            const TileInfo& t, int first_row) {
      const int tid = static_cast<int>(threadIdx.x) % 128;
      const int row0 = first_row + (tid / 32) * 16 + tid % 32 / 4;
      rows[0] = row_limits(p, t, row_address(p, w, t, row0).q_pos);
      rows[1] = row_limits(p, t, row_address(p, w, t, row0 + 8).q_pos);
      q_desc = ptx::make_kmajor_desc(sm.q() + first_row * Traits::kRowBytes);
      k_desc0 = ptx::make_kmajor_desc(sm.k(0));
      v_desc0 = ptx::make_mnmajor_desc(sm.v(0), Traits::kKVPanelBytes);
    }
    __device__ uint64_t k_desc(uint32_t stage) const {
      return ptx::desc_advance(k_desc0, stage * Traits::kKStageBytes);
    }
    __device__ uint64_t v_desc(uint32_t stage) const {
      return ptx::desc_advance(v_desc0, stage * Traits::kVStageBytes);
    }
  };

  // Softcap, then the mask where the block needs one.
  // `softcap_scale`: the tile's (kernel.cuh, tile_scales), nonzero with a softcap (negative with a
  // negative scale).
  __device__ static void transform_scores(const FwdParams& p, const TileInfo& t, STile& s,
                                          const RowLimits (&rows)[2], int n_block, int lane,
                                          float softcap_scale) {
    if (softcap_scale != 0.f) {
#pragma unroll
      for (int i = 0; i < Traits::kSRegs; ++i) s[i] = ptx::tanh_approx(s[i] * softcap_scale);
    }
    if (block_needs_mask<Traits>(p, t, n_block)) {
      if (mask_has_left<Traits>(p, t, n_block)) {
        apply_mask<Traits, true>(s, rows, n_block, lane);
      } else {
        apply_mask<Traits, false>(s, rows, n_block, lane);
      }
    }
  }

  // A K or V stage is ready. Gathered stages were written by cp.async (generic proxy) and are
  // read next by wgmma (async proxy): each reading thread fences between the two.
  __device__ static void wait_kv(const FwdParams& p, uint64_t* full, uint32_t phase) {
    ptx::mbarrier_wait_or_trap(full, phase);
    if (p.kv.source == KVSource::kPagedGather ||
        (Traits::kFp8KV && p.kv.source == KVSource::kPagedTmaWiden)) {
      ptx::fence_proxy_async_shared();  // widened stages too: generic-proxy stores
    }
  }

  // Varlen and paged TMA load the block holding the sequence's end whole (kv_loader.cuh), so V
  // rows past the end of block n (the tile's first, highest block) hold whatever lies there (the
  // next sequence, a page's unused slots: NaN included), and P = 0 times NaN would reach O. Both
  // consumers zero those rows (every panel's rows valid..kBlockN-1 are contiguous) before their
  // first P V, which reads this stage, and meet on kVTail; TMA wrote the stage before v_full
  // completed, and the zeros (generic proxy) are fenced before wgmma (async proxy) reads them. Once
  // per tile, only where the end falls inside the block; the same condition in both consumers, so
  // both reach the barrier.
  __device__ static void zero_v_tail(const SharedPlan<Traits>& sm, const TileInfo& t,
                                     const Pipeline& kv, int n, int consumer) {
    const int valid = t.seqlen_k - n * Traits::kBlockN;
    if (valid >= Traits::kBlockN) return;
    static_assert(Traits::kRowBytes == 128, "zero_panel_rows takes 128-byte rows");
    const int ctid = consumer * 128 + static_cast<int>(threadIdx.x) % 128;
    ptx::mbarrier_wait_or_trap(sm.v_full(kv.stage()), kv.phase());
    ptx::zero_panel_rows<Traits::kHeadDimV / Traits::kPanelCols>(
        ptx::smem_address(sm.v(kv.stage())), Traits::kKVPanelBytes, valid, Traits::kBlockN, ctid,
        kConsumerThreads);
    ptx::fence_proxy_async_shared();
    // Unaligned: a consumer without rows (compute_rows<true>) meets its partner here from another
    // instantiation of this function.
    ptx::named_barrier_sync_unaligned(kVTail, kConsumerThreads);
  }

  // None of the consumer's 64 rows of the tile exists (compute_rows<true>). The producer reads
  // the same rule for consumer 1 (load_tile's v_flag).
  __device__ static bool consumer_idle(const FwdParams& p, const TileInfo& t, int consumer) {
    return consumer * Traits::kRowsPerConsumer >= t.rows(p);
  }

  // Traits::kConsumerWidensV with codes by TMA: v_full also counts consumer 1's 128 threads
  // (kernel.cuh). Called by every consumer thread right after its wait on k_full of the block
  // in stage kv.stage(). Consumer 1 on a tile without its rows (kIdle: the producer flagged the
  // block's job kVWidenedByConsumer by the same rule) widens the block's V codes and arrives;
  // on other tiles it only arrives (warps 1..3 widen V). Phases cannot mix: consumer 1 arrives
  // on v_full of a stage before its k_empty arrival of that stage, which the stage's next job
  // waits for, and k_full of this block means warps 1..3 are done with the stage's last job.
  template <bool kIdle>
  __device__ static void widen_v_or_arrive(const FwdParams& p, const SharedPlan<Traits>& sm,
                                           const Pipeline& kv, int consumer) {
    if constexpr (Traits::kConsumerWidensV) {
      if (consumer != 1 || p.kv.source != KVSource::kPagedTmaWiden) return;
      const uint32_t s = kv.stage();
      if constexpr (kIdle) {
        ptx::mbarrier_wait_or_trap(sm.v_raw(s), kv.phase());
        Loader::template widen_codes<Traits::kHeadDimV, ptx::kWarpgroupThreads>(
            ptx::smem_address(sm.v(s)), sm.v_full(s),
            static_cast<uint32_t>(threadIdx.x) % ptx::kWarpgroupThreads);
      } else {
        ptx::mbarrier_arrive(sm.v_full(s));
      }
    }
  }

  // The turn passes around the ring 0, 1, .., kConsumerWarpgroups - 1: each barrier meets its
  // waiter and the warpgroup before it.
  static constexpr int kTurnThreads = 2 * ptx::kWarpgroupThreads;
  __device__ static void turn_begin(int consumer) {
    ptx::named_barrier_sync(kGemmTurn0 + consumer, kTurnThreads);
  }
  __device__ static void turn_end(int consumer) {
    const int next = consumer + 1 == Traits::kConsumerWarpgroups ? 0 : consumer + 1;
    ptx::named_barrier_arrive(kGemmTurn0 + next, kTurnThreads);
  }

  // One consumer warpgroup's part of a tile with at least one KV block: accumulates the
  // unnormalized O of its 64 rows and the softmax statistics.
  __device__ static void compute_tile(const FwdParams& p, const SharedPlan<Traits>& sm,
                                      const WorkTile& w, const TileInfo& t, int consumer,
                                      ConsumerState& st, OTile& o,
                                      OnlineSoftmax<Traits::kSRegs>& softmax, float softcap_scale) {
    if constexpr (kSplitTiles) {
      if (split_tile(p, t)) {
        compute_split(p, sm, w, t, consumer, st, o, softmax, softcap_scale);
        return;
      }
    }
    if (consumer_idle(p, t, consumer)) {
      compute_rows</*kIdle=*/true>(p, sm, w, t, consumer, st, o, softmax, softcap_scale);
    } else {
      compute_rows</*kIdle=*/false>(p, sm, w, t, consumer, st, o, softmax, softcap_scale);
    }
  }

  // Split tiles: a tile whose rows all lie in consumer 0's 64 (a batch decode item, a short
  // varlen tail) and that has at least two KV blocks. Consumer 1 would idle through it
  // (compute_rows<true>), and consumer 0 alone was the bound of a decode tile on few CTAs (run
  // set ae: ~2400 cycles a 128-key block against ~1024 of tensor work). Instead both compute
  // consumer 0's rows, each every other KV block (consumer c the blocks i = c, c + 2, .. counted
  // from the tile's first, highest one) with its own softmax state, and consumer 1 hands its
  // state to consumer 0 at the end (exchange_split). No GEMM turns (the ring's state is the same
  // after the tile); every block's full barriers are waited and its empty barriers arrived on by
  // both, the owner after its GEMMs, the other at once (after the full wait: an arrival before
  // the stage holds the block would count toward the phase of the block before). Not for fp8
  // caches (consumer 1 widens V there), O staged in Q, more than two consumers, or a V stage
  // smaller than consumer 1's O in fp32 ((192, 128): 112-key blocks). Run set af (H100): a
  // decode tile on 16 CTAs 1.27x faster, step (a) 1.02x (docs/perf/batch.md).
  static constexpr bool kSplitTiles = !Traits::kFp8KV && !Traits::kOInQ &&
                                      Traits::kConsumerWarpgroups == 2 &&
                                      Traits::kORegs * 128 * 4 <= Traits::kVStageBytes;
  __device__ static bool split_tile(const FwdParams& p, const TileInfo& t) {
    return consumer_idle(p, t, 1) && t.n_blocks() >= 2;
  }

  __device__ static void compute_split(const FwdParams& p, const SharedPlan<Traits>& sm,
                                       const WorkTile& w, const TileInfo& t, int consumer,
                                       ConsumerState& st, OTile& o,
                                       OnlineSoftmax<Traits::kSRegs>& softmax,
                                       float softcap_scale) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const TileOperands op(p, sm, w, t, /*first_row=*/0);  // consumer 0's rows, for both

    float s[Traits::kSRegs];
    uint32_t pf[Traits::kPSteps][4];
    float correction[2];
    const int blocks = t.n_blocks();
    // Consumer 1's last block: its V stage carries the exchange (its release waits for it).
    const int last_of_1 = blocks - 1 - ((blocks - 2) & 1);
    Pipeline exchange = st.kv;

    ptx::mbarrier_wait_or_trap(sm.q_full(), st.q_phase);
    for (int i = 0, n = t.n_block_max - 1; n >= t.n_block_min; ++i, --n) {
      const uint32_t stage = st.kv.stage();
      const bool own = (i & 1) == consumer;
      wait_kv(p, sm.k_full(stage), st.kv.phase());
      if (own) {
        gemm_and_wait(s, o, pf, s, [&] { issue_qk(s, op.q_desc, op.k_desc(stage)); });
      }
      ptx::mbarrier_arrive(sm.k_empty(stage));
      // The tile's first block holds the sequence's end: both zero V's rows past it (and meet).
      if (i == 0 && p.kv.zero_v_tail) zero_v_tail(sm, t, st.kv, n, consumer);
      if (own) {
        transform_scores(p, t, s, op.rows, n, lane, softcap_scale);
        update_softmax(softmax, s, correction);
        convert_p(s, pf);
        if (i > 1) rescale_o(o, correction);  // before its first block (i < 2) O is still zero
        wait_kv(p, sm.v_full(stage), st.kv.phase());
        gemm_and_wait(s, o, pf, o, [&] { issue_pv(o, pf, op.v_desc(stage)); });
      } else {
        ptx::mbarrier_wait_or_trap(sm.v_full(stage), st.kv.phase());
      }
      // Both note the exchange's stage (consumer 0 reads O1 there); consumer 1 releases it
      // after exchange_split.
      if (i == last_of_1) exchange = st.kv;
      if (consumer == 0 || i != last_of_1) ptx::mbarrier_arrive(sm.v_empty(stage));
      st.kv.advance();
    }
    exchange_split(sm, consumer, exchange, o, softmax);
    ptx::mbarrier_arrive(sm.q_empty());  // after the exchange, which uses Q's unused rows
    if (consumer == 1) ptx::mbarrier_arrive(sm.v_empty(exchange.stage()));
    st.q_phase ^= 1;
  }

  // Consumer 1's O (fp32) into the V stage of its last block, its row maxima and partial sums
  // into Q's rows 64..127 (a split tile has no rows there, and Q is not released before this),
  // element r of thread t at float r * 128 + t (one store a register, every bank once); consumer
  // 0 then folds them into its own: m = max(m0, m1), O = O0 2^(m0 - m) + O1 2^(m1 - m), the sums
  // alike (in units of the logits' scale). Each thread of consumer 1 holds the same rows and
  // columns as its twin in consumer 0, so the per-thread sums stay partial sums of the same
  // columns (finalize's quad reduction adds them up). The second barrier keeps consumer 1 from
  // its epilogue and the stage's release until consumer 0 has read everything; the proxy fence
  // then orders these generic-proxy accesses before TMA (async proxy) refills the stage and Q.
  __device__ static void exchange_split(const SharedPlan<Traits>& sm, int consumer,
                                        const Pipeline& exchange, OTile& o,
                                        OnlineSoftmax<Traits::kSRegs>& softmax) {
    static_assert(Traits::kORegs * 128 * 4 <= Traits::kVStageBytes, "split: O1 fits a V stage");
    // Q's first panel, rows 64..127 (panels are 128 rows of 128 bytes).
    static_assert(4 * 128 * 4 <= 64 * Traits::kRowBytes, "split: statistics fit Q's upper rows");
    const uint32_t tid = static_cast<uint32_t>(threadIdx.x) % 128;
    float* const o1 = reinterpret_cast<float*>(sm.v(exchange.stage()));
    float* const stats = reinterpret_cast<float*>(sm.q() + 64 * Traits::kRowBytes);
    if (consumer == 1) {
#pragma unroll
      for (int r = 0; r < Traits::kORegs; ++r) o1[r * 128 + tid] = o[r];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        stats[h * 128 + tid] = softmax.row_max[h];
        stats[(2 + h) * 128 + tid] = softmax.row_sum[h];
      }
    }
    ptx::named_barrier_sync(kSplitMerge, kConsumerThreads);
    if (consumer == 0) {
      float f0[2], f1[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m0 = softmax.row_max[h], m1 = stats[h * 128 + tid];
        const float m = fmaxf(m0, m1);
        // A side that saw no visible key (max -inf) adds nothing; both: the row stays empty.
        f0[h] = m0 == -INFINITY ? 0.f : ptx::exp2_approx((m0 - m) * softmax.scale_log2);
        f1[h] = m1 == -INFINITY ? 0.f : ptx::exp2_approx((m1 - m) * softmax.scale_log2);
        softmax.row_sum[h] = softmax.row_sum[h] * f0[h] + stats[(2 + h) * 128 + tid] * f1[h];
        softmax.row_max[h] = m;
      }
#pragma unroll
      for (int r = 0; r < Traits::kORegs; ++r) {
        o[r] = fmaf(o[r], f0[(r >> 1) & 1], o1[r * 128 + tid] * f1[(r >> 1) & 1]);
      }
    }
    ptx::named_barrier_sync(kSplitMerge, kConsumerThreads);
    ptx::fence_proxy_async_shared();
  }

  // kIdle: none of this warpgroup's 64 rows exists (a varlen tile's tail, a batch decode item of
  // up to 64 rows): it issues no GEMM and no softmax but keeps the pipeline's rhythm (every
  // full-barrier wait, empty-barrier arrival and GEMM turn), so its partner and the producer
  // see the same protocol. Its O stays zero and its epilogue stores no row. A compile-time
  // switch, not a runtime branch around the GEMM issues: ptxas serializes every wgmma of a
  // function where a branch sits between a warpgroup.arrive and its commit (C7515; it did so
  // from 08cf445 on: an arrive and a wait around each of the 64 HGMMAs at hd128).
  template <bool kIdle>
  __device__ static void compute_rows(const FwdParams& p, const SharedPlan<Traits>& sm,
                                      const WorkTile& w, const TileInfo& t, int consumer,
                                      ConsumerState& st, OTile& o,
                                      OnlineSoftmax<Traits::kSRegs>& softmax, float softcap_scale) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const TileOperands op(p, sm, w, t, consumer * Traits::kRowsPerConsumer);

    float s[Traits::kSRegs];
    uint32_t pf[Traits::kPSteps][4];
    float correction[2];

    ptx::mbarrier_wait_or_trap(sm.q_full(), st.q_phase);

    // First (highest) KV block: S only.
    int n = t.n_block_max - 1;
    wait_kv(p, sm.k_full(st.kv.stage()), st.kv.phase());
    widen_v_or_arrive<kIdle>(p, sm, st.kv, consumer);
    turn_begin(consumer);
    if constexpr (!kIdle) {
      fence_all(s, o, pf);
      ptx::wgmma_fence();
      issue_qk(s, op.q_desc, op.k_desc(st.kv.stage()));
      ptx::wgmma_commit_group();
    }
    turn_end(consumer);
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(s);
    if (!Traits::kOInQ && t.n_blocks() == 1) ptx::mbarrier_arrive(sm.q_empty());
    ptx::mbarrier_arrive(sm.k_empty(st.kv.stage()));
    if constexpr (!kIdle) {
      transform_scores(p, t, s, op.rows, n, lane, softcap_scale);
      update_softmax(softmax, s, correction);
      convert_p(s, pf);
      correction[0] = correction[1] = 1.f;  // O is still zero: nothing to correct
    }
    if (p.kv.zero_v_tail) zero_v_tail(sm, t, st.kv, n, consumer);
    Pipeline prev = st.kv;
    st.kv.advance();

    // Steady state: S of block n with O += P V of block n + 1 in flight.
    for (n = t.n_block_max - 2; n >= t.n_block_min; --n) {
      wait_kv(p, sm.k_full(st.kv.stage()), st.kv.phase());
      widen_v_or_arrive<kIdle>(p, sm, st.kv, consumer);
      wait_kv(p, sm.v_full(prev.stage()), prev.phase());
      turn_begin(consumer);
      if constexpr (!kIdle) {
        fence_all(s, o, pf);
        ptx::wgmma_fence();
        issue_qk(s, op.q_desc, op.k_desc(st.kv.stage()));
        ptx::wgmma_commit_group();
        // The last update's rescale of O runs while S is on the tensor cores, off the path from
        // the last P V's completion to this turn (FlashAttention-3's place for it).
        rescale_o(o, correction);
        ptx::fence_operands(o);
        ptx::wgmma_fence();
        issue_pv(o, pf, op.v_desc(prev.stage()));
        ptx::wgmma_commit_group();
      }
      turn_end(consumer);
      ptx::wgmma_wait_group<1>();  // S is ready; O += P V may still run
      ptx::fence_operands(s);
      if (!Traits::kOInQ && n == t.n_block_min) ptx::mbarrier_arrive(sm.q_empty());
      ptx::mbarrier_arrive(sm.k_empty(st.kv.stage()));
      if constexpr (!kIdle) {
        transform_scores(p, t, s, op.rows, n, lane, softcap_scale);
        update_softmax(softmax, s, correction);
      }
      ptx::wgmma_wait_group<0>();  // O and the P registers are free again
      ptx::fence_operands(o);
      ptx::mbarrier_arrive(sm.v_empty(prev.stage()));
      if constexpr (!kIdle) convert_p(s, pf);
      prev = st.kv;
      st.kv.advance();
    }

    // Last block's O += P V, after the last update's rescale (no S to hide it behind).
    if constexpr (!kIdle) rescale_o(o, correction);
    wait_kv(p, sm.v_full(prev.stage()), prev.phase());
    turn_begin(consumer);
    if constexpr (!kIdle) {
      fence_all(s, o, pf);
      ptx::wgmma_fence();
      issue_pv(o, pf, op.v_desc(prev.stage()));
      ptx::wgmma_commit_group();
    }
    turn_end(consumer);
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(o);
    ptx::mbarrier_arrive(sm.v_empty(prev.stage()));
    st.q_phase ^= 1;
  }
};

}  // namespace hopattn::kernels::fwd
