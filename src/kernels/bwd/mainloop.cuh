// Mainloop of the bwd kernel. A CTA owns one KV block (kBlockN keys of one KV head and request)
// and walks, for each q head of the KV head's GQA group, the q tiles whose rows see those keys.
// Three roles, each walking that same (head, q tile) sequence:
//
//   loader (producer warp 0, one thread): K and V once (kv_full); per step Q + lse_log2 into
//       q ring stage s (q_full/q_empty) and dO + delta into dO stage s (do_full/do_empty).
//   MMA warpgroup w, per step, operands swapped so that the keys are the wgmma M dimension
//       (traits.cuh: by keys, w owns keys 64w..64w+63 and all q columns; by columns, all 64 keys
//       and q columns 32w..32w+31):
//         S^T = K_w Q_w^T,  dP^T = V_w dO_w^T                     (SS, async)
//         P^T = 2^(S^T scale_log2 - lse_log2),  dS^T = P^T (dP^T - delta)   (softcap: * (1 - t^2))
//         dS^T (by columns also P^T) -> shared memory (together: the full kBlockN x kBlockM tile)
//         dQ_w = dS K[:, panels of w] (SS, both operands MN-major)   -> fp32 staging buffer w
//         dV += P^T dO,  dK += dS^T Q    (registers across steps; by keys RS with P^T, dS^T as
//                                         A fragments, by columns SS per 64-column panel of w)
//   dQ writer (producer warp 1, one thread; in deterministic mode with two staging sets also
//       warp 2, the two taking steps in turn): bulk reduce-adds each staging buffer into the fp32
//       dq_accum tile in global memory; in deterministic mode it first waits until the tile's
//       semaphore says every higher KV block has added, and bumps it after its own add landed.
//       Not at 256 (kDqFromRegisters): there the MMA threads add their dQ registers into dq_accum
//       with v4 reductions (add_dq) and wait for the turn themselves, and the writer idles.
#pragma once

#include <climits>
#include <cmath>

#include "kernels/bwd/traits.cuh"
#include "ptx/atomic.cuh"
#include "ptx/bulk_copy.cuh"
#include "ptx/fast_math.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/shared_vector.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"

namespace hopattn::kernels::bwd {

using ptx::kHangTimeoutNs;

// What one CTA works on; computed identically by every role from blockIdx alone.
struct CtaWork {
  int n_block, kv_head, batch;
  SeqInfo seq;
  BlockGeometry geo;
  int m_begin, m_end;  // q tiles meeting the KV block (same for every head of the group)

  __device__ bool has_keys() const { return n_block * geo.block_n < seq.seqlen_k; }
  __device__ bool has_steps() const { return has_keys() && m_begin < m_end; }
};

template <class Traits>
__device__ __forceinline__ CtaWork make_cta_work(const BwdParams& p) {
  const CtaOrder::Coord c = p.order.at(static_cast<int>(blockIdx.x));
  CtaWork w;
  w.n_block = c.n_block;
  w.kv_head = c.group % p.heads_kv;
  w.batch = c.group / p.heads_kv;
  w.seq = seq_info(p.seq, p.ws, Traits::kBlockM, w.batch);
  w.geo = BlockGeometry{w.seq.seqlen_q, w.seq.seqlen_k,  p.window_left,
                        p.window_right, Traits::kBlockM, Traits::kBlockN};
  const BlockGeometry::MRange r =
      w.has_keys() ? w.geo.m_range(w.n_block) : BlockGeometry::MRange{0, 0};
  w.m_begin = r.begin;
  w.m_end = r.end;
  return w;
}

// Position in the CTA's step sequence (all heads' q tiles in order): ring stage and phase of the
// Q/dO rings, dS buffer and dQ hand-over parity.
template <int kStages>
struct StepCounter {
  uint32_t step = 0;
  __device__ uint32_t stage() const { return step % kStages; }
  __device__ uint32_t phase() const { return (step / kStages) & 1u; }
  __device__ uint32_t parity() const { return step & 1u; }  // dS buffer, dQ staging hand-over
  // Folded dQ (two staging buffers used in turn): the buffer's phase.
  __device__ uint32_t pair_phase() const { return (step >> 1) & 1u; }
  __device__ void advance() { ++step; }
};

template <class Traits>
struct BwdMainloop {
  using Elt = typename Traits::Elt;
  using Steps = StepCounter<Traits::kStages>;
  static constexpr int kM = Traits::kBlockM;
  static constexpr int kQKPanels = Traits::kQKPanels;
  static constexpr int kVPanels = Traits::kVPanels;
  static constexpr uint32_t kDqPanelBytes = 4u * kDqPanelFloats;

  // ---------------------------------------------------------------------------- loader
  __device__ static void load(const BwdParams& p, const SharedPlan<Traits>& sm, const CtaWork& w) {
    ptx::prefetch_tensor_map(&p.tm_q);
    ptx::prefetch_tensor_map(&p.tm_do);
    const int key_row = w.seq.row_k + w.n_block * Traits::kBlockN;
    ptx::mbarrier_arrive_expect_tx(sm.kv_full(), Traits::kKBytes + Traits::kVBytes);
#pragma unroll
    for (int i = 0; i < kQKPanels; ++i) {
      ptx::tma_load_4d(sm.k() + i * Traits::kKVPanelBytes, &p.tm_k, sm.kv_full(),
                       i * Traits::kPanelCols, w.kv_head, key_row, w.seq.batch_coord);
    }
#pragma unroll
    for (int i = 0; i < kVPanels; ++i) {
      ptx::tma_load_4d(sm.v() + i * Traits::kKVPanelBytes, &p.tm_v, sm.kv_full(),
                       i * Traits::kPanelCols, w.kv_head, key_row, w.seq.batch_coord);
    }
    Steps st;
    for (int r = 0; r < p.group; ++r) {
      const int head = w.kv_head * p.group + r;
      const int64_t stat_row0 = head * p.ws.rows + w.seq.ws_row0;
      for (int m = w.m_begin; m < w.m_end; ++m) {
        const uint32_t s = st.stage();
        const int q_row = w.seq.row_q + m * kM;
        ptx::mbarrier_wait_or_trap(sm.q_empty(s), st.phase() ^ 1);
        ptx::mbarrier_arrive_expect_tx(sm.q_full(s), Traits::kQStageBytes + Traits::kRowStatBytes);
#pragma unroll
        for (int i = 0; i < kQKPanels; ++i) {
          ptx::tma_load_4d(sm.q(s) + i * Traits::kQPanelBytes, &p.tm_q, sm.q_full(s),
                           i * Traits::kPanelCols, head, q_row, w.seq.batch_coord);
        }
        ptx::bulk_load(sm.lse(s), p.ws.lse_log2 + stat_row0 + m * kM, Traits::kRowStatBytes,
                       sm.q_full(s));
        ptx::mbarrier_wait_or_trap(sm.do_empty(s), st.phase() ^ 1);
        ptx::mbarrier_arrive_expect_tx(sm.do_full(s),
                                       Traits::kDoStageBytes + Traits::kRowStatBytes);
#pragma unroll
        for (int i = 0; i < kVPanels; ++i) {
          ptx::tma_load_4d(sm.dout(s) + i * Traits::kQPanelBytes, &p.tm_do, sm.do_full(s),
                           i * Traits::kPanelCols, head, q_row, w.seq.batch_coord);
        }
        ptx::bulk_load(sm.delta(s), p.ws.delta + stat_row0 + m * kM, Traits::kRowStatBytes,
                       sm.do_full(s));
        st.advance();
      }
    }
  }

  // ---------------------------------------------------------------------------- dQ writer
  // Staging buffer of warpgroup g's dQ at a step (g = 0 where folded: one buffer a step) and the
  // phase of its barriers: with two sets a set serves every other step.
  __device__ static int dq_buffer(const Steps& st, int sets, int g) {
    return (sets == 2 ? static_cast<int>(st.parity()) * Traits::kDqPerStep : 0) + g;
  }
  __device__ static uint32_t dq_phase(const Steps& st, int sets) {
    return sets == 2 ? st.pair_phase() : st.parity();
  }

  // Writers of a CTA: in deterministic mode two, writer w (producer warp 1 + w) taking the steps
  // of parity w, so that two tiles' chains (the turn, the reduction, its landing, the release)
  // run at once: one writer's chain a step was longer than the MMA warps' step (hd64: 0.58-0.80x
  // of normal with one writer, 0.86-0.97x with two; docs/perf/bwd.md). With two staging sets a
  // writer owns one; with one set ((192, 128): no room for two) the writers share it, and a
  // writer takes step s only after the other released step s - 1's buffers (hand_over), which
  // still overlaps one step's landing and release with the next one's turn and reduction (where
  // the mask has no right bound: store_dq). The normal mode has one writer. Sets and writers are
  // compile-time (the kernel is built per mode): with its 24 registers the writer spills on a
  // run-time choice.
  static constexpr int kMaxDqWriters = Traits::kDqPerStep > 0 ? 2 : 1;

  // One staging set shared by two writers: wait until step s - 1's buffer of warpgroup g is
  // released. A parity wait cannot tell phase s from phase s - 2, so the dq_full wait of step s
  // is safe only once phase s - 1 has completed, which this release implies; dq_empty cannot
  // run past phase s - 1 meanwhile, since phase s is this writer's own release.
  __device__ static void hand_over(const SharedPlan<Traits>& sm, const Steps& st, int g) {
    if (st.step > 0) ptx::mbarrier_wait_or_trap(sm.dq_empty(g), (st.step - 1) & 1u);
  }

  // The writers' loop, with their count: one set shared by two writers ((192, 128),
  // deterministic) only where the call's mask has no right bound. There the turns have mostly
  // come in the launch order and the hand-over overlaps one step's landing with the next one's
  // reduction (H100, run set ad: B=8 2k 1.13-1.14x faster); under a causal mask each step waits
  // for its turn, the hand-over adds the previous writer's landing to that wait, and the same
  // rows ran 1.04-1.08x slower. Chosen at entry, each count its own loop: a count read in the
  // loop would cost the writer (24 registers) spills.
  template <bool kDeterministic>
  __device__ static void store_dq(const BwdParams& p, const SharedPlan<Traits>& sm,
                                  const CtaWork& w, int writer) {
    if constexpr (kDeterministic && Traits::dq_sets(kDeterministic) == 1) {
      if (p.window_right < 0) {
        write_dq<kDeterministic, 2>(p, sm, w, writer);
      } else {
        write_dq<kDeterministic, 1>(p, sm, w, writer);
      }
    } else {
      write_dq<kDeterministic, kDeterministic ? 2 : 1>(p, sm, w, writer);
    }
  }

  template <bool kDeterministic, uint32_t kWriters>
  __device__ static void write_dq(const BwdParams& p, const SharedPlan<Traits>& sm,
                                  const CtaWork& w, int writer) {
    constexpr int kSets = Traits::dq_sets(kDeterministic);
    constexpr int kTileFloats = kM * Traits::kHeadDim;
    constexpr int kPerStep = Traits::kDqPerStep;
    if (writer >= static_cast<int>(kWriters)) return;
    Steps st;
    for (int r = 0; r < p.group; ++r) {
      const int head = w.kv_head * p.group + r;
      const int64_t tile0 = (head * p.ws.rows + w.seq.ws_row0) / kM;  // tile index of m = 0
      for (int m = w.m_begin; m < w.m_end; ++m, st.advance()) {
        if (static_cast<int>(st.step % kWriters) != writer) continue;
        float* dst = p.ws.dq_accum + (tile0 + m) * kTileFloats;
        uint32_t* sem = kDeterministic ? p.ws.semaphore + tile0 + m : nullptr;
        if constexpr (kDeterministic) wait_turn(sem, w.geo.dq_turn(m, w.n_block));
#pragma unroll
        for (int g = 0; g < kPerStep; ++g) {  // folded (Dqk 64): one buffer, both halves summed
          const int b = dq_buffer(st, kSets, g);
          if constexpr (kSets == 1 && kWriters == 2) hand_over(sm, st, b);
          ptx::mbarrier_wait_or_trap(sm.dq_full(b), dq_phase(st, kSets));
#pragma unroll
          for (int i = 0; i < Traits::kDqSlots; ++i) {
            const int panel = Traits::dq_panel(g, i);
            if (!Traits::has_panel(panel, kQKPanels)) continue;
            ptx::bulk_reduce_add_f32(dst + panel * kDqPanelFloats, sm.dq(b) + i * kDqPanelFloats,
                                     kDqPanelBytes);
          }
          ptx::bulk_commit();  // one group a buffer: the buffer is read when its group ends
        }
        if constexpr (kPerStep == 2) {
          ptx::bulk_wait_read<1>();
          ptx::mbarrier_arrive(sm.dq_empty(dq_buffer(st, kSets, 0)));
        }
        ptx::bulk_wait_read<0>();
        ptx::mbarrier_arrive(sm.dq_empty(dq_buffer(st, kSets, kPerStep - 1)));
        if constexpr (kDeterministic) {
          // The sums must have landed in global memory before the next KV block may add.
          ptx::bulk_wait_all<0>();
          ptx::fence_proxy_async_all();
          ptx::red_add_release_gpu(sem, 1);
        }
      }
    }
    ptx::bulk_wait_all<0>();  // nothing may be in flight when the CTA exits
  }

  // By keys (Dqk 64) the two warpgroups' dQ halves are the same floats: warpgroup 1 adds its half
  // to warpgroup 0's staged one (fold_dq) and the writer reduces the sum once a step. Two
  // reductions of the same 16 KB cost the normal mode 1.13-1.18x (twice the L2 atomics) and the
  // deterministic mode a landing between them every step (the chain its MMA warps waited on);
  // docs/perf/NOTES.md, run set ab.
  static constexpr bool kFoldDq = Traits::kDqByKeys;
  static_assert(!kFoldDq || Traits::kDqSets == 2,
                "folded dQ: a staging buffer for each of two steps");

  // Deterministic order: KV block n adds to a dQ tile after exactly `turn` higher blocks did
  // (BlockGeometry::dq_turn). The spin has no backoff: in the launch order the turn has mostly
  // come already, and when not, the hand-over's latency is what the MMA warpgroups wait for.
  // False if the turn has not come within kHangTimeoutNs (the caller traps).
  __device__ static bool spin_turn(const uint32_t* sem, int turn) {
    if (ptx::load_acquire_gpu(sem) != static_cast<uint32_t>(turn)) {
      const uint64_t start = ptx::global_timer_ns();
      while (ptx::load_acquire_gpu(sem) != static_cast<uint32_t>(turn)) {
        if (ptx::global_timer_ns() - start > kHangTimeoutNs) return false;
      }
    }
    return true;
  }
  __device__ static void wait_turn(const uint32_t* sem, int turn) {
    if (!spin_turn(sem, turn)) __trap();
    ptx::fence_proxy_async_all();  // the bulk reduction that follows is ordered after the read
  }

  // Index of q tile m of a head in dq_accum (tiles of kM x Dqk floats) and the semaphores.
  __device__ static int64_t dq_tile(const BwdParams& p, const CtaWork& w, int head, int m) {
    return (head * p.ws.rows + w.seq.ws_row0) / kM + m;
  }

  // ---------------------------------------------------------------------------- MMA warpgroups
  using STile = float[Traits::kSRegs];
  using Fragments = uint32_t[Traits::kSSteps][4];

  // Identity of an MMA thread. Only the warpgroup index is kept; the thread's position is read
  // again from threadIdx where it is needed (cheaper than the registers it would hold across the
  // main loop, whose budget the dK/dV and score accumulators use up).
  struct MmaThread {
    int wg;  // 0 or 1: keys 64 wg .. 64 wg + 63 of the block
    __device__ int tid() const { return static_cast<int>(threadIdx.x) % 128; }
    __device__ int lane() const { return static_cast<int>(threadIdx.x) % 32; }
  };

  // Query rows [lo[h], hi[h]] that key row h of this thread (h = 0: block row
  // 64 wg + 16 (tid / 32) + lane / 4; h = 1: 8 further) sees; empty (lo > hi) past kv_len.
  struct KeyRows {
    int lo[2], hi[2];
  };
  __device__ static KeyRows key_rows(const BwdParams& p, const CtaWork& w, const MmaThread& t) {
    constexpr int64_t kFar = int64_t{1} << 30;
    KeyRows k;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t key = int64_t{w.n_block} * Traits::kBlockN + Traits::key_row0(t.wg) +
                          (t.tid() / 32) * 16 + t.lane() / 4 + 8 * h;
      int64_t lo = p.window_right >= 0 ? key - w.geo.diag() - p.window_right : -1;
      const int64_t hi = p.window_left >= 0 ? key - w.geo.diag() + p.window_left : kFar;
      if (key >= w.seq.seqlen_k) lo = kFar;
      k.lo[h] = static_cast<int>(lo < -1 ? -1 : (lo > kFar ? kFar : lo));
      k.hi[h] = static_cast<int>(hi < -1 ? -1 : (hi > kFar ? kFar : hi));
    }
    return k;
  }

  // Register i of an m64nN accumulator: row (key) half (i >> 1) & 1, column (query)
  // 8 (i >> 2) + 2 (lane % 4) + (i & 1).
  __device__ static int column_of(int i, int lane) {
    return 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
  }

  // S^T = K_w Q_w^T (kSteps = kQKSteps) or dP^T = V_w dO_w^T (kVSteps), K-major both: k16 step j
  // reads 16 columns of panel j / 4.
  template <int kSteps>
  __device__ static void issue_scores(STile& acc, uint64_t kv_desc, uint64_t q_desc) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      ptx::wgmma_ss<Traits::kSCols, Elt, 0, 0>(
          acc, ptx::desc_advance(kv_desc, (j / 4) * Traits::kKVPanelBytes + (j % 4) * 32),
          ptx::desc_advance(q_desc, (j / 4) * Traits::kQPanelBytes + (j % 4) * 32),
          j > 0 ? 1u : 0u);
    }
  }

  // dQ panel = dS K[:, panel]: A = dS^T stored [key][q] (MN-major, transposed A), B = K stored
  // [key][d] (MN-major, transposed B); k16 step j = keys 16j..16j+15 = 2048 bytes further.
  __device__ static void issue_dq(float (&dq)[Traits::kDqRegs], uint64_t ds_desc, uint64_t k_desc) {
#pragma unroll
    for (int j = 0; j < Traits::kNSteps; ++j) {
      ptx::wgmma_ss<kDqPanelCols, Elt, 1, 1>(dq, ptx::desc_advance(ds_desc, 2048 * j),
                                             ptx::desc_advance(k_desc, 2048 * j), j > 0 ? 1u : 0u);
    }
  }

  // By columns: acc += A^T B[:, panel] over the q tile, A^T = P^T or dS^T stored [key][64 q]
  // (K-major: k16 step j is 32 bytes along the row), B = dO or Q stored [q][d] (MN-major).
  __device__ static void issue_kv_ss(float (&acc)[32], uint64_t a_desc, uint64_t b_desc) {
#pragma unroll
    for (int j = 0; j < Traits::kMSteps; ++j) {
      ptx::wgmma_ss<64, Elt, 0, 1>(acc, ptx::desc_advance(a_desc, 32 * j),
                                   ptx::desc_advance(b_desc, 2048 * j), 1u);
    }
  }

  // acc += A^T B over the q tile, A^T from registers (P^T or dS^T), B = dO or Q stored [q][d]
  // (MN-major, transposed B).
  template <int kN>
  __device__ static void issue_rs(float (&acc)[kN / 2], const Fragments& a, uint64_t b_desc) {
#pragma unroll
    for (int j = 0; j < Traits::kMSteps; ++j) {
      ptx::wgmma_rs<kN, Elt, 1>(acc, a[j], ptx::desc_advance(b_desc, 2048 * j), 1u);
    }
  }

  // After S^T is ready: softcap (s becomes t = tanh), mask, and without softcap P itself.
  template <bool kSoftcap>
  __device__ static void scores_to_p(const BwdParams& p, const CtaWork& w, const MmaThread& t,
                                     STile& s, const float* lse, int q0, bool masked) {
    if constexpr (kSoftcap) {
#pragma unroll
      for (int i = 0; i < Traits::kSRegs; ++i) s[i] = ptx::tanh_approx(s[i] * p.softcap_scale);
    }
    if (masked) {
      const KeyRows k = key_rows(p, w, t);
      const int lane = t.lane();
#pragma unroll
      for (int i = 0; i < Traits::kSRegs; ++i) {
        const int col = q0 + column_of(i, lane);
        const int h = (i >> 1) & 1;
        if (col < k.lo[h] || col > k.hi[h]) s[i] = -INFINITY;
      }
    }
    if constexpr (!kSoftcap) {
#pragma unroll
      for (int c = 0; c < Traits::kSRegs / 4; ++c) {
        const float2 l = *reinterpret_cast<const float2*>(lse + 8 * c + 2 * (t.lane() % 4));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float lk = (k & 1) ? l.y : l.x;
          s[4 * c + k] = ptx::exp2_approx(fmaf(s[4 * c + k], p.scale_log2, -lk));
        }
      }
    }
  }

  // After dP^T is ready: s becomes P^T, dp becomes dS^T (unscaled: the softmax scale is applied
  // to dK here at the end and to dQ in the postprocess).
  template <bool kSoftcap>
  __device__ static void grad_scores(const BwdParams& p, const MmaThread& t, STile& s, STile& dp,
                                     const float* lse, const float* delta) {
    const int col0 = 2 * (t.lane() % 4);
    if constexpr (kSoftcap) {
#pragma unroll
      for (int c = 0; c < Traits::kSRegs / 4; ++c) {
        const float2 d = *reinterpret_cast<const float2*>(delta + 8 * c + col0);
        const float2 l = *reinterpret_cast<const float2*>(lse + 8 * c + col0);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int i = 4 * c + k;
          const float tk = s[i];  // -inf where masked: P = 0, and the clamp keeps 1 - t^2 = 0
          const float pk = ptx::exp2_approx(fmaf(tk, p.scale_log2, -((k & 1) ? l.y : l.x)));
          const float tc = fmaxf(tk, -1.f);
          dp[i] = pk * (dp[i] - ((k & 1) ? d.y : d.x)) * (1.f - tc * tc);
          s[i] = pk;
        }
      }
    } else {
#pragma unroll
      for (int c = 0; c < Traits::kSRegs / 4; ++c) {
        const float2 d = *reinterpret_cast<const float2*>(delta + 8 * c + col0);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int i = 4 * c + k;
          dp[i] = s[i] * (dp[i] - ((k & 1) ? d.y : d.x));
        }
      }
    }
  }

  // The accumulator of a 64x16 block is in A-fragment order: k16 step j is registers 8j..8j+7.
  __device__ static void to_fragments(const STile& x, Fragments& f) {
#pragma unroll
    for (int j = 0; j < Traits::kSSteps; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) f[j][r] = ptx::pack2<Elt>(x[8 * j + 2 * r], x[8 * j + 2 * r + 1]);
    }
  }

  // This warpgroup's part of dS^T (or P^T) into a [key][64 q] buffer, 128B-swizzled: fragment
  // (j, r) holds q columns s_col0 + 8 (2j + r / 2) + 2 (lane % 4), +1 of key row key_row0 +
  // 16 (tid / 32) + lane / 4 + 8 (r % 2); the 16-byte chunk c of a row sits at c ^ (row % 8).
  // A warp's 32 stores of one (j, r) cover 8 rows x 4 lanes on 32 distinct banks.
  __device__ static void store_ds(uint32_t ds_addr, const MmaThread& t, const Fragments& f) {
    const int lane = t.lane();
    const uint32_t g = static_cast<uint32_t>(lane) / 4;  // row % 8
    const uint32_t row_addr =
        ds_addr +
        (Traits::key_row0(t.wg) + (t.tid() / 32) * 16 + static_cast<int>(g)) * Traits::kRowBytes +
        (lane % 4) * 4;
    const uint32_t c0 = static_cast<uint32_t>(Traits::s_col0(t.wg)) / 8;
#pragma unroll
    for (int j = 0; j < Traits::kSSteps; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint32_t c = c0 + 2 * j + r / 2;
        const uint32_t addr = row_addr + (r % 2) * 8 * Traits::kRowBytes + ((c ^ g) << 4);
        ptx::st_shared_u32(addr, f[j][r]);
      }
    }
  }

  // One dQ panel of this warpgroup into its slot of the staging buffer, in fragment order
  // (workspace.hpp).
  __device__ static void stage_dq(float* buf, int tid, const float (&dq)[Traits::kDqRegs]) {
    const uint32_t base = ptx::smem_address(buf) + static_cast<uint32_t>(tid) * 16u;
#pragma unroll
    for (int c = 0; c < Traits::kDqRegs / 4; ++c) {
      ptx::st_shared_v4_f32(base + c * 128 * 16, dq[4 * c], dq[4 * c + 1], dq[4 * c + 2],
                            dq[4 * c + 3]);
    }
  }

  // Folded dQ (kFoldDq): warpgroup 1's thread adds its dQ half to the chunks warpgroup 0's
  // thread of the same index staged (the same fragment positions). One fp32 add an element, the
  // same operands every run.
  __device__ static void fold_dq(float* buf, int tid, const float (&dq)[Traits::kDqRegs]) {
    const uint32_t base = ptx::smem_address(buf) + static_cast<uint32_t>(tid) * 16u;
#pragma unroll
    for (int c = 0; c < Traits::kDqRegs / 4; ++c) {
      const uint4 v = ptx::ld_shared_v4(base + c * 128 * 16);
      ptx::st_shared_v4_f32(base + c * 128 * 16, __uint_as_float(v.x) + dq[4 * c],
                            __uint_as_float(v.y) + dq[4 * c + 1],
                            __uint_as_float(v.z) + dq[4 * c + 2],
                            __uint_as_float(v.w) + dq[4 * c + 3]);
    }
  }

  // dQ from registers (kDqFromRegisters): this thread's 16-byte chunks of its panels of the tile,
  // added in fragment order (workspace.hpp), the chunk that stage_dq would put in shared memory.
  // A warp's reduction covers 512 contiguous bytes.
  __device__ static void add_dq(float* tile, const MmaThread& t,
                                const float (&dq)[Traits::kDqSlots][Traits::kDqRegs]) {
#pragma unroll
    for (int i = 0; i < Traits::kDqSlots; ++i) {
      const int panel = Traits::dq_panel(t.wg, i);
      if (!Traits::has_panel(panel, kQKPanels)) continue;
      float* chunk = tile + panel * kDqPanelFloats + 4 * t.tid();
#pragma unroll
      for (int c = 0; c < Traits::kDqRegs / 4; ++c) {
        ptx::red_add_v4_f32(chunk + c * 128 * 4, dq[i][4 * c], dq[i][4 * c + 1], dq[i][4 * c + 2],
                            dq[i][4 * c + 3]);
      }
    }
  }

  // A descriptor the compiler must compute where it is used: without this it hoists every k-step's
  // descriptor of every stage out of the loop and keeps them all live (spilled) across it.
  __device__ static uint64_t fresh(uint64_t desc) {
    asm volatile("" : "+l"(desc));
    return desc;
  }

  // Accumulators an MMA thread keeps across its CTA's steps (traits.cuh: slots of columns).
  struct KvAccum {
    float dk[Traits::kDkSlots][Traits::kDkRegs];
    float dv[Traits::kDvSlots][Traits::kDvRegs];
    __device__ void fence() {
#pragma unroll
      for (int i = 0; i < Traits::kDkSlots; ++i) ptx::fence_operands(dk[i]);
#pragma unroll
      for (int i = 0; i < Traits::kDvSlots; ++i) ptx::fence_operands(dv[i]);
    }
  };

  __device__ static void fence_fragments(Fragments& pf, Fragments& dsf) {
#pragma unroll
    for (int j = 0; j < Traits::kSSteps; ++j) {
      ptx::fence_operands(pf[j]);
      ptx::fence_operands(dsf[j]);
    }
  }

  // By keys: dV += P^T dO, dK += dS^T Q with P^T and dS^T as A fragments (RS).
  __device__ static void issue_kv_rs(const SharedPlan<Traits>& sm, uint32_t s, KvAccum& acc,
                                     const Fragments& pf, const Fragments& dsf) {
    issue_rs<Traits::kHeadDimV>(acc.dv[0], pf,
                                fresh(ptx::make_mnmajor_desc(sm.dout(s), Traits::kQPanelBytes)));
    issue_rs<Traits::kHeadDim>(acc.dk[0], dsf,
                               fresh(ptx::make_mnmajor_desc(sm.q(s), Traits::kQPanelBytes)));
  }

  // By columns: the same GEMMs for this warpgroup's 64-column panels, A = P^T or dS^T of all 64
  // q rows from shared memory (both warpgroups wrote their halves before the barrier).
  __device__ static void issue_kv_by_columns(const SharedPlan<Traits>& sm, uint32_t s, int wg,
                                             KvAccum& acc, const uint8_t* p_buf,
                                             const uint8_t* ds_buf) {
#pragma unroll
    for (int i = 0; i < Traits::kDvSlots; ++i) {
      const int panel = Traits::issued_panel(Traits::kv_panel(wg, i), kVPanels);
      issue_kv_ss(acc.dv[i], fresh(ptx::make_kmajor_desc(p_buf)),
                  fresh(ptx::make_mnmajor_desc(sm.dout(s) + panel * Traits::kQPanelBytes,
                                               Traits::kQPanelBytes)));
    }
#pragma unroll
    for (int i = 0; i < Traits::kDkSlots; ++i) {
      const int panel = Traits::issued_panel(Traits::kv_panel(wg, i), kQKPanels);
      issue_kv_ss(acc.dk[i], fresh(ptx::make_kmajor_desc(ds_buf)),
                  fresh(ptx::make_mnmajor_desc(sm.q(s) + panel * Traits::kQPanelBytes,
                                               Traits::kQPanelBytes)));
    }
  }

  // Varlen: a block's or a tile's rows past its sequence's end hold the next sequence's rows (or
  // whatever follows the last one), and a masked entry does not stop their NaN or Inf: dQ = dS K
  // multiplies dS's zeros by K's rows, dK = dS^T Q and dV = P^T dO by Q's and dO's. Both MMA
  // warpgroups zero those rows in shared memory once the TMA bytes landed, fence them for wgmma,
  // and meet on kTailZeroed before either issues a GEMM that reads them. Dense tiles need none of
  // this: TMA fills rows past S with zeros. The rows get lse_log2 = +inf and delta = 0
  // (preprocess), so P^T and dS^T are exactly zero there.
  template <int kPanels>
  __device__ static void zero_rows(uint32_t base, uint32_t panel_bytes, int valid, int rows,
                                   const MmaThread& t) {
    ptx::zero_panel_rows<kPanels>(base, panel_bytes, valid, rows, t.wg * 128 + t.tid(),
                                  Traits::kMmaThreads);
  }
  __device__ static void zero_key_tail(const SharedPlan<Traits>& sm, const CtaWork& w,
                                       const MmaThread& t) {
    const int valid = w.seq.seqlen_k - w.n_block * Traits::kBlockN;
    if (valid >= Traits::kBlockN) return;
    zero_rows<kQKPanels>(ptx::smem_address(sm.k()), Traits::kKVPanelBytes, valid, Traits::kBlockN,
                         t);
    zero_rows<kVPanels>(ptx::smem_address(sm.v()), Traits::kKVPanelBytes, valid, Traits::kBlockN,
                        t);
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(kTailZeroed, Traits::kMmaThreads);
  }
  __device__ static void zero_query_tail(const SharedPlan<Traits>& sm, const CtaWork& w,
                                         const MmaThread& t, int m, const Steps& st) {
    const int valid = w.seq.seqlen_q - m * kM;
    if (valid >= kM) return;
    const uint32_t s = st.stage();
    ptx::mbarrier_wait_or_trap(sm.q_full(s), st.phase());
    ptx::mbarrier_wait_or_trap(sm.do_full(s), st.phase());
    zero_rows<kQKPanels>(ptx::smem_address(sm.q(s)), Traits::kQPanelBytes, valid, kM, t);
    zero_rows<kVPanels>(ptx::smem_address(sm.dout(s)), Traits::kQPanelBytes, valid, kM, t);
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(kTailZeroed, Traits::kMmaThreads);
  }

  // One step (one q tile of one head) of an MMA warpgroup: dK and dV accumulate in registers.
  // Returns true if the deterministic turn (dQ from registers) timed out: the caller traps after
  // its loop (a trap inside the step makes ptxas serialize every wgmma and spill).
  template <bool kSoftcap, bool kDeterministic>
  __device__ static bool step(const BwdParams& p, const SharedPlan<Traits>& sm, const CtaWork& w,
                              const MmaThread& t, int head, int m, const Steps& st, KvAccum& acc) {
    const uint32_t s = st.stage();
    const int key_row0 = Traits::key_row0(t.wg), s_col0 = Traits::s_col0(t.wg);

    // Deterministic dQ from registers: the tile's turn (64-bit divisions) is computed here, where
    // registers are free; after the dQ GEMM it would crowd dQ, dK and dV (spills).
    int turn = 0;
    bool hung = false;
    if constexpr (Traits::kDqFromRegisters) {
      turn = w.geo.dq_turn(m, w.n_block);
      asm volatile("" : "+r"(turn));  // keeps the compiler from sinking it to its use
    }
    float sacc[Traits::kSRegs];
    float dp[Traits::kSRegs];
    ptx::mbarrier_wait_or_trap(sm.q_full(s), st.phase());
    ptx::fence_operands(sacc);
    ptx::wgmma_fence();
    issue_scores<Traits::kQKSteps>(
        sacc, fresh(ptx::make_kmajor_desc(sm.k() + key_row0 * Traits::kRowBytes)),
        fresh(ptx::make_kmajor_desc(sm.q(s) + s_col0 * Traits::kRowBytes)));
    ptx::wgmma_commit_group();
    ptx::mbarrier_wait_or_trap(sm.do_full(s), st.phase());
    ptx::fence_operands(dp);
    ptx::wgmma_fence();  // the wait above is a loop: the fence must follow it
    issue_scores<Traits::kVSteps>(
        dp, fresh(ptx::make_kmajor_desc(sm.v() + key_row0 * Traits::kRowBytes)),
        fresh(ptx::make_kmajor_desc(sm.dout(s) + s_col0 * Traits::kRowBytes)));
    ptx::wgmma_commit_group();

    ptx::wgmma_wait_group<1>();  // S^T ready; dP^T may still run
    ptx::fence_operands(sacc);
    scores_to_p<kSoftcap>(p, w, t, sacc, sm.lse(s) + s_col0, m * kM + s_col0,
                          w.geo.needs_mask(m, w.n_block));
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(dp);
    grad_scores<kSoftcap>(p, t, sacc, dp, sm.lse(s) + s_col0, sm.delta(s) + s_col0);

    uint32_t pf[Traits::kSSteps][4], dsf[Traits::kSSteps][4];
    to_fragments(sacc, pf);
    to_fragments(dp, dsf);
    const int buffer = static_cast<int>(st.parity());
    uint8_t* ds_buf = sm.ds(buffer);
    store_ds(ptx::smem_address(ds_buf), t, dsf);
    if constexpr (Traits::kSharedKeys) store_ds(ptx::smem_address(sm.p(buffer)), t, pf);
    ptx::fence_proxy_async_shared();  // generic stores, read next by wgmma
    if constexpr (Traits::kDqByKeys) {
      // Constant ids (a computed one makes ptxas reserve all 16 barriers).
      if (t.wg == 0) {
        ptx::named_barrier_sync(kDsWrittenWg0, 128);
      } else {
        ptx::named_barrier_sync(kDsWrittenWg1, 128);
      }
    } else {
      ptx::named_barrier_sync(kDsWritten, Traits::kMmaThreads);
    }

    // dQ: A = dS^T rows of the keys this warpgroup sums over (its own by keys, else all); B = the
    // same keys' rows of K, the slot's 64-column panel.
    float dq[Traits::kDqSlots][Traits::kDqRegs];
    const uint32_t dq_row0 = Traits::kDqByKeys ? key_row0 : 0;
#pragma unroll
    for (int i = 0; i < Traits::kDqSlots; ++i) ptx::fence_operands(dq[i]);
    acc.fence();
    if constexpr (!Traits::kSharedKeys) fence_fragments(pf, dsf);  // A operands of the RS GEMMs
    ptx::wgmma_fence();
#pragma unroll
    for (int i = 0; i < Traits::kDqSlots; ++i) {
      const int panel = Traits::issued_panel(Traits::dq_panel(t.wg, i), kQKPanels);
      issue_dq(
          dq[i],
          fresh(ptx::make_smem_desc(ds_buf + dq_row0 * Traits::kRowBytes, Traits::kDsBytes, 1024)),
          fresh(ptx::make_mnmajor_desc(
              sm.k() + panel * Traits::kKVPanelBytes + dq_row0 * Traits::kRowBytes,
              Traits::kKVPanelBytes)));
    }
    ptx::wgmma_commit_group();
    if constexpr (Traits::kSharedKeys) {
      issue_kv_by_columns(sm, s, t.wg, acc, sm.p(buffer), ds_buf);
    } else {
      issue_kv_rs(sm, s, acc, pf, dsf);
    }
    ptx::wgmma_commit_group();

    if constexpr (Traits::kDqFromRegisters) {
      // Deterministic: every MMA thread waits for the tile's turn itself (its acquire orders its
      // own reductions after the higher blocks' sums), while the dK/dV GEMMs run.
      const int64_t tile = dq_tile(p, w, head, m);
      uint32_t* sem = kDeterministic ? p.ws.semaphore + tile : nullptr;
      ptx::wgmma_wait_group<1>();  // dQ ready; dV and dK may still run
#pragma unroll
      for (int i = 0; i < Traits::kDqSlots; ++i) ptx::fence_operands(dq[i]);
      hung = sem != nullptr && !spin_turn(sem, turn);
      add_dq(p.ws.dq_accum + tile * (kM * Traits::kHeadDim), t, dq);
      if (sem != nullptr) {
        // Every thread's sums are performed (gpu scope) before the barrier, and the barrier
        // before the one release that hands the tile to the next KV block.
        ptx::fence_acq_rel_gpu();
        ptx::named_barrier_sync(kDqAdded, Traits::kMmaThreads);
        if (t.wg == 0 && t.tid() == 0) ptx::red_add_release_gpu(sem, 1);
      }
    } else {
      ptx::wgmma_wait_group<1>();  // dQ ready; dV and dK may still run
#pragma unroll
      for (int i = 0; i < Traits::kDqSlots; ++i) ptx::fence_operands(dq[i]);
      constexpr int kSets = Traits::dq_sets(kDeterministic);  // 2 where folded
      if constexpr (kFoldDq) {
        // Warpgroup 0 stages once buffer b is free, warpgroup 1 adds its half and hands the sum
        // to the writer (dq_full(b) counts warpgroup 1's 128 threads). A barrier id a buffer:
        // warpgroup 0 may be a step ahead, and its next arrival on an id waits for the writer to
        // free that buffer, i.e. for warpgroup 1's fold into it.
        const int b = dq_buffer(st, kSets, 0);
        if (t.wg == 0) {
          ptx::mbarrier_wait_or_trap(sm.dq_empty(b), dq_phase(st, kSets) ^ 1);
          stage_dq(sm.dq(b), t.tid(), dq[0]);
          if (b == 0) {
            ptx::named_barrier_arrive(kDqStaged0, Traits::kMmaThreads);
          } else {
            ptx::named_barrier_arrive(kDqStaged1, Traits::kMmaThreads);
          }
        } else {
          if (b == 0) {
            ptx::named_barrier_sync(kDqStaged0, Traits::kMmaThreads);
          } else {
            ptx::named_barrier_sync(kDqStaged1, Traits::kMmaThreads);
          }
          fold_dq(sm.dq(b), t.tid(), dq[0]);
          ptx::fence_proxy_async_shared();  // generic stores, read next by the bulk reduction
          ptx::mbarrier_arrive(sm.dq_full(b));
        }
      } else {
        const int b = dq_buffer(st, kSets, t.wg);
        ptx::mbarrier_wait_or_trap(sm.dq_empty(b), dq_phase(st, kSets) ^ 1);
#pragma unroll
        for (int i = 0; i < Traits::kDqSlots; ++i) {
          if (Traits::has_panel(Traits::dq_panel(t.wg, i), kQKPanels)) {
            stage_dq(sm.dq(b) + i * kDqPanelFloats, t.tid(), dq[i]);
          }
        }
        ptx::fence_proxy_async_shared();  // generic stores, read next by the bulk reduction
        ptx::mbarrier_arrive(sm.dq_full(b));
      }
    }

    ptx::wgmma_wait_group<0>();
    acc.fence();
    if constexpr (!Traits::kSharedKeys) fence_fragments(pf, dsf);
    ptx::mbarrier_arrive(sm.q_empty(s));
    ptx::mbarrier_arrive(sm.do_empty(s));
    return hung;
  }
};

}  // namespace hopattn::kernels::bwd
