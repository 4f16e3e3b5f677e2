// The main bwd kernel: one CTA per (KV block, KV head, request); warpgroup 0 is the producer
// (warp 0 loads, warp 1 reduce-adds dQ; their registers go to the MMA warpgroups), warpgroups 1
// and 2 each own 64 of the block's 128 keys (head dims up to 128) or 64-column panels of the
// block's 64 keys (above), and keep their dK and dV in registers across every q head of the GQA
// group and every q tile. See README.md in this folder.
#pragma once

#include <cstdint>

#include "kernels/bwd/mainloop.cuh"
#include "kernels/bwd/traits.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/setmaxnreg.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"

namespace hopattn::kernels::bwd {

// dK (scaled) or dV of one MMA warpgroup, straight from the accumulators: slot i holds
// columns 64 panel(i).. (by columns; by keys one slot of all columns), register r of a slot key
// row half (r >> 1) & 1 and column 8 (r >> 2) + 2 (lane % 4) + (r & 1), so each 4-byte store
// writes a column pair. Keys past kv_len and slots past the head dim are not written.
template <class Traits, int kSlots, int kRegs>
__device__ __forceinline__ void store_key_rows(void* out, int64_t batch_stride, int64_t row_stride,
                                               int64_t head_stride, const CtaWork& w, int wg,
                                               int tid, const float (&acc)[kSlots][kRegs],
                                               int panels, float scale) {
  using Elt = typename Traits::Elt;
  const int lane = tid % 32;
  const int key0 = w.n_block * Traits::kBlockN + Traits::key_row0(wg) + (tid / 32) * 16 + lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = key0 + 8 * h;
    if (key >= w.seq.seqlen_k) continue;
    Elt* row = static_cast<Elt*>(out) + w.batch * batch_stride +
               static_cast<int64_t>(w.seq.row_k + key) * row_stride + w.kv_head * head_stride +
               2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int panel = Traits::kv_panel(wg, i);
      if (!Traits::has_panel(panel, panels)) continue;
#pragma unroll
      for (int c = 0; c < kRegs / 4; ++c) {
        *reinterpret_cast<uint32_t*>(row + 64 * panel + 8 * c) =
            ptx::pack2<Elt>(acc[i][4 * c + 2 * h] * scale, acc[i][4 * c + 2 * h + 1] * scale);
      }
    }
  }
}

// Softcap is a compile-time choice of the MMA code (the kernel branches once at the top): as a
// run-time test inside the score loops it keeps both variants' values live and costs registers.
// kDeterministic: the launch's mode (the kernel is built for each), which fixes the dQ staging
// sets and writers (mainloop.cuh) at compile time.
template <class Traits, bool kSoftcap, bool kDeterministic>
__device__ void run_mma(const BwdParams& p, const SharedPlan<Traits>& sm, const CtaWork& w,
                        int wg) {
  using Mainloop = BwdMainloop<Traits>;
  typename Mainloop::KvAccum acc;
#pragma unroll
  for (int i = 0; i < Traits::kDkSlots; ++i) {
#pragma unroll
    for (int r = 0; r < Traits::kDkRegs; ++r) acc.dk[i][r] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < Traits::kDvSlots; ++i) {
#pragma unroll
    for (int r = 0; r < Traits::kDvRegs; ++r) acc.dv[i][r] = 0.f;
  }
  const typename Mainloop::MmaThread t{wg};
  if (w.has_steps()) {
    ptx::mbarrier_wait_or_trap(sm.kv_full(), 0);
    const bool varlen = p.seq.cu_seqlens_q != nullptr;
    if (varlen) Mainloop::zero_key_tail(sm, w, t);
    typename Mainloop::Steps st;
    bool hung = false;
    for (int r = 0; r < p.group; ++r) {
      const int head = Traits::kDqFromRegisters ? w.kv_head * p.group + r : 0;  // dQ's tile
      for (int m = w.m_begin; m < w.m_end; ++m) {
        if (varlen) Mainloop::zero_query_tail(sm, w, t, m, st);
        if constexpr (Traits::kDqFromRegisters) {
          if (Mainloop::template step<kSoftcap, kDeterministic>(p, sm, w, t, head, m, st, acc))
            hung = true;
        } else {
          Mainloop::template step<kSoftcap, kDeterministic>(p, sm, w, t, head, m, st, acc);
        }
        st.advance();
      }
    }
    if (Traits::kDqFromRegisters && hung)
      __trap();  // a deterministic turn that never came (a missing KV block)
  }
  // Keys no query sees (or a request without queries) get zero gradients.
  store_key_rows<Traits>(p.dk, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride, w, wg, t.tid(),
                         acc.dk, Traits::kQKPanels, p.scale);
  store_key_rows<Traits>(p.dv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride, w, wg, t.tid(),
                         acc.dv, Traits::kVPanels, 1.f);
}

template <class Traits, bool kDeterministic>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    bwd_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  const SharedPlan<Traits> sm{ptx::align_to_1024(smem_raw)};
  const CtaWork w = make_cta_work<Traits>(p);
  if (!w.has_keys()) return;  // a varlen request shorter than this block: nothing to do

  if (threadIdx.x == 0) {
    ptx::mbarrier_init(sm.kv_full(), 1);
    for (int s = 0; s < Traits::kStages; ++s) {
      ptx::mbarrier_init(sm.q_full(s), 1);
      ptx::mbarrier_init(sm.q_empty(s), Traits::kMmaThreads);
      ptx::mbarrier_init(sm.do_full(s), 1);
      ptx::mbarrier_init(sm.do_empty(s), Traits::kMmaThreads);
    }
    for (int b = 0; b < Traits::kDqBuffers; ++b) {
      ptx::mbarrier_init(sm.dq_full(b), 128);
      ptx::mbarrier_init(sm.dq_empty(b), 1);
    }
  }
  __syncthreads();

  const int warpgroup = ptx::warpgroup_index();
  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<Traits::kProducerRegisters>();
    if (!w.has_steps()) return;
    if (threadIdx.x == 0) {
      ptx::prefetch_tensor_map(&p.tm_k);
      ptx::prefetch_tensor_map(&p.tm_v);
      BwdMainloop<Traits>::load(p, sm, w);
    } else if (!Traits::kDqFromRegisters && threadIdx.x % 32 == 0 &&
               threadIdx.x / 32 <= BwdMainloop<Traits>::kMaxDqWriters) {
      BwdMainloop<Traits>::template store_dq<kDeterministic>(
          p, sm, w, static_cast<int>(threadIdx.x / 32) - 1);
    }
  } else {
    ptx::setmaxnreg_inc<Traits::kMmaRegisters>();
    if (p.softcap_scale != 0.f) {
      run_mma<Traits, true, kDeterministic>(p, sm, w, warpgroup - 1);
    } else {
      run_mma<Traits, false, kDeterministic>(p, sm, w, warpgroup - 1);
    }
  }
}

}  // namespace hopattn::kernels::bwd
