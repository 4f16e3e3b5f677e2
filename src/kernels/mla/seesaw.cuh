// The MLA kernel's seesaw schedule for 16-bit caches: blocks of 64 keys taken in pairs, consumer
// warpgroup w computes S of block 2k + w (36 m64n64k16 steps over the 576 columns) and owns
// output columns [256 w, 256 w + 256). The running row max moves one way through a pair:
//
//   consumer 0: S0 -> max m0 (from the base m), P0 = 2^(S0 - m0), O_L = O_L f0 + P0 V0_L
//   consumer 1: S1 -> max m1 (from m0),         P1 = 2^(S1 - m1), O_R = O_R f0 f1 + P1 V1_R
//   consumer 0: P0 f1 parked in buffer 0's kpe panel; O_L = O_L f1 + P1 V1_L (P1 from buffer 1)
//   consumer 1: O_R += (P0 f1) V0_R
//
// so consumer 1's softmax waits for consumer 0's max only, never the other way round, and each
// consumer's next S GEMM is issued beside the other's softmax and P V. With the lazy base of
// OnlineSoftmax::update_lazy the factors f0, f1 are exactly 1 on most blocks and the rescales are
// skipped (exact). The row sums are kept per consumer against the same base and added at the end.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/fwd/softmax.cuh"
#include "kernels/mla/consumer.cuh"
#include "kernels/mla/kernel.cuh"
#include "kernels/mla/seesaw_loader.cuh"
#include "kernels/mla/seesaw_traits.cuh"
#include "kernels/mla/tile.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/setmaxnreg.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"

namespace hopattn::kernels::mla {

template <class Traits>
struct SeesawConsumer {
  using Elt = typename Traits::Elt;
  using Plan = SeesawPlan<Traits>;
  using Base = MlaConsumer<Traits>;  // row layout, mask, rescale, P publishing, Q's load
  using Softmax = fwd::OnlineSoftmax<Traits::kSRegs>;
  using OTile = float[Traits::kORegs];
  using STile = float[Traits::kSRegs];
  using PFragments = uint32_t[Traits::kPVSteps][4];
  static constexpr int kPairThreads = Traits::kConsumerThreads;
  static constexpr int kKeys = Traits::kBlockKeys;

  // Row arrays of the plan: the base after block 2k (consumer 0's) and after 2k + 1, each
  // followed by the factor it moved by; then the two consumers' row sums.
  enum RowArray { kMax0 = 0, kMax1 = 2, kSum0 = 4 };

  __device__ static void wait_full(uint64_t* bar, uint32_t phase) {
    ptx::mbarrier_wait_or_trap(bar, phase);
    ptx::fence_proxy_async_shared();  // cp.async may have written it; wgmma reads it
  }

  // S = Q K^T of the block in buffer b, in two commit groups: the owner's V half (it lands
  // first), then the rest (the other V half and kpe), so that the caller can free the other
  // buffer between them (the rest of this block is loaded only after that buffer's is free).
  template <bool kOwnHalf>
  __device__ static void issue_s(STile& s, const Plan& sm, uint32_t b, uint32_t phase) {
    // Opaque: the 72 descriptors are computed at their wgmma, not hoisted out of the pair loop
    // and kept live (spilled) across it.
    const uint64_t q = ptx::opaque(ptx::make_kmajor_desc(sm.q()));
    const uint64_t k = ptx::opaque(ptx::make_kmajor_desc(sm.kv(b)));
    const auto panel = [&](int i, bool first) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ptx::wgmma_ss<kKeys, Elt, 0, 0>(s, ptx::desc_advance(q, i * Traits::kQPanelBytes + 32 * j),
                                        ptx::desc_advance(k, i * Traits::kKVPanelBytes + 32 * j),
                                        first && j == 0 ? 0u : 1u);
      }
    };
    if constexpr (kOwnHalf) {
      wait_full(sm.full_own(b), phase);
      ptx::fence_operands(s);
      ptx::wgmma_fence();
#pragma unroll
      for (int i = 0; i < Traits::kHalfPanels; ++i) panel(b * Traits::kHalfPanels + i, i == 0);
    } else {
      wait_full(sm.full_rest(b), phase);
      ptx::wgmma_fence();  // after the wait loop (ptxas would insert it: C7519)
#pragma unroll
      for (int i = 0; i < Traits::kHalfPanels; ++i) panel((1 - b) * Traits::kHalfPanels + i, false);
      panel(Traits::kLatentPanels, false);
    }
    ptx::wgmma_commit_group();
  }

  // This consumer's V columns of buffer b as the MN-major B operand.
  __device__ static uint64_t v_desc(const Plan& sm, uint32_t b, int consumer) {
    return ptx::opaque(ptx::make_mnmajor_desc(
        sm.kv(b) + consumer * Traits::kHalfPanels * Traits::kKVPanelBytes, Traits::kKVPanelBytes));
  }

  __device__ static void pack(PFragments& pf, const STile& s) {
#pragma unroll
    for (int j = 0; j < Traits::kPVSteps; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q)
        pf[j][q] = ptx::pack2<Elt>(s[8 * j + 2 * q], s[8 * j + 2 * q + 1]);
    }
  }

  __device__ static void issue_pv_rs(OTile& o, const PFragments& pf, uint64_t v) {
#pragma unroll
    for (int j = 0; j < Traits::kPVSteps; ++j) {
      ptx::wgmma_rs<Traits::kOCols, Elt, 1>(o, pf[j], ptx::desc_advance(v, 2048 * j), 1u);
    }
  }

  __device__ static void issue_pv_ss(OTile& o, const Plan& sm, uint32_t b, uint64_t v) {
    const uint64_t pd = ptx::opaque(ptx::make_kmajor_desc(sm.kpe_panel(b)));
#pragma unroll
    for (int j = 0; j < Traits::kPVSteps; ++j) {
      ptx::wgmma_ss<Traits::kOCols, Elt, 0, 1>(o, ptx::desc_advance(pd, 32 * j),
                                               ptx::desc_advance(v, 2048 * j), 1u);
    }
  }

  __device__ static void put_rows(const Plan& sm, int array, int r, const float (&v)[2]) {
    if (threadIdx.x % 4 == 0) {
      sm.rows(array)[r] = v[0];
      sm.rows(array)[r + 8] = v[1];
    }
  }
  __device__ static void get_rows(const Plan& sm, int array, int r, float (&v)[2]) {
    v[0] = sm.rows(array)[r];
    v[1] = sm.rows(array)[r + 8];
  }

  // The rows' base (softmax.row_max) and the factor it moved by, to the other consumer through
  // the row arrays `max_array`, `max_array + 1` and hand-off `h`.
  __device__ static void give_base(const Plan& sm, int max_array, SeesawHandoff h, int r,
                                   const Softmax& softmax, const float (&factor)[2]) {
    put_rows(sm, max_array, r, softmax.row_max);
    put_rows(sm, max_array + 1, r, factor);
    ptx::mbarrier_arrive(sm.handoff(h));
  }

  // The other consumer's base becomes this one's; the row sums so far shrink by its factor,
  // returned in `factor` (O's rescale is the caller's: it may fold more factors in).
  __device__ static void take_base(const Plan& sm, int max_array, SeesawHandoff h, uint32_t phase,
                                   int r, Softmax& softmax, float (&factor)[2]) {
    ptx::mbarrier_wait_or_trap(sm.handoff(h), phase);
    get_rows(sm, max_array, r, softmax.row_max);
    get_rows(sm, max_array + 1, r, factor);
    softmax.row_sum[0] *= factor[0];
    softmax.row_sum[1] *= factor[1];
  }

  // ---------------------------------------------------------------------------- consumer w
  // One warpgroup's whole part; consumer 0 owns the even blocks, 1 the odd ones (the pad block
  // of an odd count is all zeros, masked whole by `limit`).
  template <int kW>
  __device__ static void run(const MlaParams& p, const Plan& sm, const Tile& t, OTile& o,
                             float (&out_scale)[2], float (&lse)[2]) {
    const int r = Base::row0();
    const int limit[2] = {t.limit(p, r), t.limit(p, r + 8)};
    Softmax softmax(p.scale_log2);
    float s[Traits::kSRegs];
    uint32_t pf[Traits::kPVSteps][4];
#pragma unroll
    for (int i = 0; i < Traits::kORegs; ++i) o[i] = 0.f;
    const int pairs = (t.num_blocks + 1) / 2;
    const uint32_t own = kW, other = 1 - kW;

    // One pair; kNext: the next pair's S of this consumer's block is issued beside this pair's
    // last P V (the loop body keeps no branch between the GEMM issues).
    const auto pair = [&](int k, auto next) {
      constexpr bool kNext = decltype(next)::value;
      const uint32_t phase = k & 1;
      ptx::fence_operands(s);
      Base::mask(s, limit, (t.block_begin + 2 * k + kW) * kKeys);
      float f_own[2];
      if constexpr (kW == 0) {
        softmax.update_lazy(s, f_own);
        give_base(sm, kMax0, kMax0Ready, r, softmax, f_own);
        Base::rescale(o, f_own);
      } else {
        float f_first[2];
        take_base(sm, kMax0, kMax0Ready, phase, r, softmax, f_first);
        softmax.update_lazy(s, f_own);
        give_base(sm, kMax1, kMax1Ready, r, softmax, f_own);
        const float f[2] = {f_first[0] * f_own[0], f_first[1] * f_own[1]};
        Base::rescale(o, f);
      }
      pack(pf, s);
      if constexpr (kW == 1) {
        Base::store_p(ptx::smem_address(sm.kpe_panel(own)), pf);
        ptx::mbarrier_arrive(sm.handoff(kP1Ready));
      }
      // O += P V of the own block over the own columns (P from registers).
      ptx::fence_operands(o);
      Base::fence_fragments(pf);
      ptx::wgmma_fence();
      issue_pv_rs(o, pf, v_desc(sm, own, kW));
      ptx::wgmma_commit_group();
      // The own P V done, the own half of the buffer is free for the producer's reload before
      // this consumer waits for the other's hand-off (the reload's latency is on the next S's
      // path: ncu, run set n).
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(o);
      Base::fence_fragments(pf);
      ptx::mbarrier_arrive(sm.empty_own(own));
      if constexpr (kW == 0) {
        // Consumer 1's max moved past ours: P0 and the rows so far shrink by f1.
        float f1[2];
        take_base(sm, kMax1, kMax1Ready, phase, r, softmax, f1);
        if (Softmax::must_rescale(f1)) {
#pragma unroll
          for (int i = 0; i < Traits::kSRegs; ++i) s[i] *= f1[(i >> 1) & 1];
        }
        PFragments parked;
        pack(parked, s);
        Base::store_p(ptx::smem_address(sm.kpe_panel(own)), parked);
        ptx::mbarrier_arrive(sm.handoff(kP0Ready));
        Base::rescale(o, f1);
        ptx::mbarrier_wait_or_trap(sm.handoff(kP1Ready), phase);
      } else {
        ptx::mbarrier_wait_or_trap(sm.handoff(kP0Ready), phase);
      }
      // O += P V of the other block over the own columns (P parked in the other buffer).
      ptx::fence_proxy_async_shared();
      ptx::fence_operands(o);
      ptx::wgmma_fence();
      issue_pv_ss(o, sm, other, v_desc(sm, other, kW));
      ptx::wgmma_commit_group();
      // The next S's first half goes in beside the other P V; its second half needs this
      // block's rest reloaded, which needs the other P V done and the other buffer freed (the
      // producer reloads both owners' halves, then both rests).
      if constexpr (kNext) {
        issue_s<true>(s, sm, own, phase ^ 1);
        ptx::wgmma_wait_group<1>();  // the other P V is done
      } else {
        ptx::wgmma_wait_group<0>();
      }
      ptx::fence_operands(o);
      ptx::mbarrier_arrive(sm.empty_rest(other));
      if constexpr (kNext) {
        issue_s<false>(s, sm, own, phase ^ 1);
        ptx::wgmma_wait_group<0>();
        ptx::fence_operands(s);
      }
    };

    if (pairs > 0) {
      issue_s<true>(s, sm, own, 0);
      issue_s<false>(s, sm, own, 0);
      ptx::wgmma_wait_group<0>();
      for (int k = 0; k + 1 < pairs; ++k) pair(k, std::true_type{});
      pair(pairs - 1, std::false_type{});
    }
    // Both consumers' O and sums are now against the same base (the last max of consumer 1):
    // the row's sum is the two consumers' sums together.
    float sum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) sum[h] = Softmax::quad_sum(softmax.row_sum[h]);
    put_rows(sm, kSum0 + kW, r, sum);
    // Both consumers wait (a full barrier), at two instructions (one per role's copy of run):
    // the unaligned form (compute-sanitizer synccheck rejects the aligned bar.sync there).
    ptx::named_barrier_sync_unaligned(kSumsReady, kPairThreads);
    float theirs[2];
    get_rows(sm, kSum0 + (1 - kW), r, theirs);
    const float total[2] = {sum[0] + theirs[0], sum[1] + theirs[1]};
    const float no_sink[2] = {-INFINITY, -INFINITY};
    softmax.finalize_sums(total, no_sink, out_scale, lse);
  }
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    mla_seesaw_kernel(const __grid_constant__ MlaParams p) {
  extern __shared__ uint8_t smem_raw[];
  const SeesawPlan<Traits> sm{ptx::align_to_1024(smem_raw)};
  ptx::begin_dependent_grid();  // as in mla_kernel
  const Tile t = make_tile<Traits::kBlockKeys>(p);
  if (t.rows == 0) return;  // uniform over the CTA: past the request's rows

  if (threadIdx.x == 0) {
    for (uint32_t b = 0; b < Traits::kStages; ++b) {
      ptx::mbarrier_init(sm.full_own(b), 128);  // one arrival per producer thread
      ptx::mbarrier_init(sm.full_rest(b), 128);
      ptx::mbarrier_init(sm.empty_own(b), 128);  // one consumer warpgroup
      ptx::mbarrier_init(sm.empty_rest(b), 128);
    }
    for (int h = 0; h < kNumHandoffs; ++h) ptx::mbarrier_init(sm.handoff(h), 128);
  }
  __syncthreads();

  if (run_producer<Traits, SeesawLoader<Traits>>(p, sm, t)) return;
  const int role = ptx::warpgroup_index();
  MlaConsumer<Traits>::load_q(p, sm, t);
  ptx::setmaxnreg_to<Traits::kConsumerRegisters, Traits::kLaunchRegisters>();
  float o[Traits::kORegs];
  float out_scale[2], lse[2];
  if (role == 1) {
    SeesawConsumer<Traits>::template run<0>(p, sm, t, o, out_scale, lse);
  } else {
    SeesawConsumer<Traits>::template run<1>(p, sm, t, o, out_scale, lse);
  }
  finish_output<Traits>(p, sm.q(), t, role - 1, o, out_scale, lse);
}

}  // namespace hopattn::kernels::mla
