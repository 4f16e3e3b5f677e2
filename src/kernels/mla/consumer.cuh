// The two MLA consumer warpgroups. Both hold 64 rows x 256 output columns of O in registers.
//
// Consumer 0, per KV block n:  S = Q K[n]^T (36 k16 steps over the 576 columns), issued together
//   with O[:, 0:256] += P[n-1] V[n-1]; the mask and the online softmax of S run while the
//   P V step is still on the tensor cores; then it rescales O, keeps P[n] in registers (the A
//   operand of its next P V) and writes P[n] and the rows' rescale factors to shared memory.
// Consumer 1, per KV block n:  waits for P[n], rescales its O, O[:, 256:512] += P[n] V[n] with
//   both operands from shared memory, and hands P's buffer back.
// So the P V half of consumer 1 overlaps consumer 0's next S GEMM and softmax. P has one buffer:
// consumer 0 writes P[n] once consumer 1 has read P[n - 1] (p_empty). A stage is freed
// once all 256 consumer threads have finished reading it (its empty barrier counts 256).
#pragma once

#include <cmath>

#include "kernels/fwd/softmax.cuh"
#include "kernels/mla/loader.cuh"
#include "kernels/mla/q_tile.cuh"
#include "kernels/mla/tile.cuh"
#include "kernels/mla/traits.cuh"
#include "ptx/fence.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/wgmma.cuh"

namespace hopattn::kernels::mla {

template <class Traits>
struct MlaConsumer {
  using Elt = typename Traits::Elt;
  using OTile = float[Traits::kORegs];
  using STile = float[Traits::kSRegs];
  using PFragments = uint32_t[Traits::kPVSteps][4];
  static constexpr int kThreads = Traits::kConsumerThreads;

  // This thread's two rows of the 64 (accumulator layout: warp w holds rows 16w .. 16w + 15;
  // lane l rows l / 4 and l / 4 + 8).
  __device__ static int row0() { return (threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4; }

  // Both consumers: Q's 64 rows into the swizzled Q panels (q_tile.cuh).
  template <class Plan>
  __device__ static void load_q(const MlaParams& p, const Plan& sm, const Tile& t) {
    load_q_tile<Elt, kTileRows>(p, t, ptx::smem_address(sm.q()), Traits::kQPanelBytes,
                                threadIdx.x - 128, kThreads);
  }

  __device__ static void wait_stage(const SharedPlan<Traits>& sm, int n) {
    ptx::mbarrier_wait_or_trap(sm.full(n % Traits::kStages), (n / Traits::kStages) & 1);
    ptx::fence_proxy_async_shared();  // cp.async wrote the stage; wgmma reads it
  }

  __device__ static uint64_t v_desc(const SharedPlan<Traits>& sm, int n, int consumer) {
    return ptx::make_mnmajor_desc(
        sm.kv(n % Traits::kStages) + consumer * (Traits::kLatentPanels / 2) * Traits::kKVPanelBytes,
        Traits::kKVPanelBytes);
  }

  // O's rows times their factors, skipped by a warp whose factors are all exactly 1 (the lazy
  // softmax base rarely moves: 128 multiplies a thread and block saved; the product by 1 is
  // exact, so skipping it changes nothing).
  __device__ static void rescale(OTile& o, const float (&f)[2]) {
    if (!fwd::OnlineSoftmax<Traits::kSRegs>::must_rescale(f)) return;
#pragma unroll
    for (int i = 0; i < Traits::kORegs; ++i) o[i] *= f[(i >> 1) & 1];
  }

  __device__ static void fence_fragments(PFragments& pf) {
#pragma unroll
    for (int j = 0; j < Traits::kPVSteps; ++j) ptx::fence_operands(pf[j]);
  }

  __device__ static void issue_qk(STile& s, const SharedPlan<Traits>& sm, int n) {
    const uint64_t q_desc = ptx::make_kmajor_desc(sm.q());
    const uint64_t k_desc = ptx::make_kmajor_desc(sm.kv(n % Traits::kStages));
#pragma unroll
    for (int j = 0; j < Traits::kQKSteps; ++j) {
      const uint32_t col = (j % 4) * 32;
      ptx::wgmma_ss<Traits::kBlockKeys, Elt, 0, 0>(
          s, ptx::desc_advance(q_desc, (j / 4) * Traits::kQPanelBytes + col),
          ptx::desc_advance(k_desc, (j / 4) * Traits::kKVPanelBytes + col), j > 0 ? 1u : 0u);
    }
  }

  __device__ static void issue_pv_rs(OTile& o, const PFragments& pf, uint64_t v) {
#pragma unroll
    for (int j = 0; j < Traits::kPVSteps; ++j) {
      ptx::wgmma_rs<Traits::kOCols, Elt, 1>(o, pf[j], ptx::desc_advance(v, 2048 * j), 1u);
    }
  }

  // Masks keys a row does not see (past its causal bound or the split's end) to -inf. Column
  // of accumulator element i: 8 (i / 4) + 2 (lane % 4) + i % 2; its row half: (i / 2) % 2.
  __device__ static void mask(STile& s, const int (&limit)[2], int first_key) {
    const int col0 = first_key + 2 * (static_cast<int>(threadIdx.x) % 4);
#pragma unroll
    for (int i = 0; i < Traits::kSRegs; ++i) {
      const int key = col0 + 8 * (i / 4) + (i % 2);
      if (key >= limit[(i >> 1) & 1]) s[i] = -INFINITY;
    }
  }

  // P (16-bit, packed A fragments) to a shared 64-row tile at shared-window address `base` in
  // the K-major swizzled layout another warpgroup's wgmma reads as its A operand, then the proxy
  // fence (wgmma reads what st.shared wrote).
  __device__ static void store_p(uint32_t base, const PFragments& pf) {
    const int r = row0();
    const uint32_t quad = (threadIdx.x % 4) * 4;
#pragma unroll
    for (int j = 0; j < Traits::kPVSteps; ++j) {
      // k16 step j: columns 16j .. 16j + 15 = chunks 2j (regs 0, 1) and 2j + 1 (regs 2, 3).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t row = r + 8 * h;
        ptx::st_shared_u32(base + swizzled_offset(0, row, 2 * j) + quad, pf[j][h]);
        ptx::st_shared_u32(base + swizzled_offset(0, row, 2 * j + 1) + quad, pf[j][2 + h]);
      }
    }
    ptx::fence_proxy_async_shared();
  }

  // P (unnormalized) to the shared P tile consumer 1 reads, and the rows' rescale factors beside
  // it.
  __device__ static void publish_p(const SharedPlan<Traits>& sm, const PFragments& pf,
                                   const float (&correction)[2]) {
    const int r = row0();
    if (threadIdx.x % 4 == 0) {
      sm.row_factor()[r] = correction[0];
      sm.row_factor()[r + 8] = correction[1];
    }
    store_p(ptx::smem_address(sm.p()), pf);
  }

  // ---------------------------------------------------------------------------- consumer 0
  __device__ static void run0(const MlaParams& p, const SharedPlan<Traits>& sm, const Tile& t,
                              OTile& o, float (&out_scale)[2], float (&lse)[2]) {
    const int r = row0();
    const int limit[2] = {t.limit(p, r), t.limit(p, r + 8)};
    fwd::OnlineSoftmax<Traits::kSRegs> softmax(p.scale_log2);
    float s[Traits::kSRegs];
    uint32_t pf[Traits::kPVSteps][4];
    float correction[2];
#pragma unroll
    for (int i = 0; i < Traits::kORegs; ++i) o[i] = 0.f;

    // Block 0 (S only), then blocks 1.. with the previous block's P V issued beside S: the loop
    // body holds no branch between the GEMM issues, so ptxas keeps them asynchronous.
    const auto soften = [&](int n) {
      ptx::fence_operands(s);
      mask(s, limit, (t.block_begin + n) * Traits::kBlockKeys);
      softmax.update_lazy(s, correction);
    };
    const auto hand_over = [&](int n) {
      rescale(o, correction);
#pragma unroll
      for (int j = 0; j < Traits::kPVSteps; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q)
          pf[j][q] = ptx::pack2<Elt>(s[8 * j + 2 * q], s[8 * j + 2 * q + 1]);
      }
      if (n > 0)
        ptx::mbarrier_wait_or_trap(sm.p_empty(), (n - 1) & 1);  // consumer 1 has read P[n - 1]
      publish_p(sm, pf, correction);
      ptx::mbarrier_arrive(sm.p_full());
    };
    if (t.num_blocks > 0) {
      wait_stage(sm, 0);
      ptx::fence_operands(s);
      ptx::wgmma_fence();
      issue_qk(s, sm, 0);
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<0>();
      soften(0);
      hand_over(0);
    }
    for (int n = 1; n < t.num_blocks; ++n) {
      wait_stage(sm, n);
      ptx::fence_operands(s);
      ptx::fence_operands(o);
      fence_fragments(pf);
      ptx::wgmma_fence();
      issue_qk(s, sm, n);
      ptx::wgmma_commit_group();
      issue_pv_rs(o, pf, v_desc(sm, n - 1, 0));
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<1>();  // S is ready; O += P V may still run
      soften(n);
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(o);
      fence_fragments(pf);
      ptx::mbarrier_arrive(sm.empty((n - 1) % Traits::kStages));
      hand_over(n);
    }
    if (t.num_blocks > 0) {
      const int n = t.num_blocks - 1;
      ptx::fence_operands(o);
      fence_fragments(pf);
      ptx::wgmma_fence();
      issue_pv_rs(o, pf, v_desc(sm, n, 0));
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(o);
      ptx::mbarrier_arrive(sm.empty(n % Traits::kStages));
    }
    const float no_sink[2] = {-INFINITY, -INFINITY};
    softmax.finalize(no_sink, out_scale, lse);
    if (threadIdx.x % 4 == 0) {
      sm.final_scale()[r] = out_scale[0];
      sm.final_scale()[r + 8] = out_scale[1];
    }
    ptx::mbarrier_arrive(sm.final_ready());
  }

  // ---------------------------------------------------------------------------- consumer 1
  __device__ static void run1(const MlaParams&, const SharedPlan<Traits>& sm, const Tile& t,
                              OTile& o, float (&out_scale)[2]) {
    const int r = row0();
#pragma unroll
    for (int i = 0; i < Traits::kORegs; ++i) o[i] = 0.f;
    const uint64_t p_desc = ptx::make_kmajor_desc(sm.p());
    for (int n = 0; n < t.num_blocks; ++n) {
      wait_stage(sm, n);
      ptx::mbarrier_wait_or_trap(sm.p_full(), n & 1);
      const float f[2] = {sm.row_factor()[r], sm.row_factor()[r + 8]};
      rescale(o, f);
      ptx::fence_operands(o);
      ptx::wgmma_fence();
      const uint64_t v = v_desc(sm, n, 1);
#pragma unroll
      for (int j = 0; j < Traits::kPVSteps; ++j) {
        ptx::wgmma_ss<Traits::kOCols, Elt, 0, 1>(o, ptx::desc_advance(p_desc, 32 * j),
                                                 ptx::desc_advance(v, 2048 * j), 1u);
      }
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(o);
      ptx::mbarrier_arrive(sm.empty(n % Traits::kStages));
      ptx::mbarrier_arrive(sm.p_empty());
    }
    ptx::mbarrier_wait_or_trap(sm.final_ready(), 0);
    out_scale[0] = sm.final_scale()[r];
    out_scale[1] = sm.final_scale()[r + 8];
  }
};

}  // namespace hopattn::kernels::mla
