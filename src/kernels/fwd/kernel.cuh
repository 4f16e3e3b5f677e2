// The fwd kernel: a persistent, warp-specialized FlashAttention-3-class forward pass. Warpgroup 0
// is the producer (one thread issues every TMA load; with a paged cache that TMA cannot address,
// warps 1..3 gather K and V by cp.async, and with one it can, warp 0 loads Q and K and warp 1
// V; its registers go to the consumers);
// warpgroups 1 and 2 are consumers owning 64 query rows each of a 128-row work tile. All three
// walk the same tile sequence from the Scheduler: LptTileScheduler for fwd calls, the batch
// family's work lists (src/kernels/batch/scheduler.cuh) for its persistent launch. See README.md
// in this folder.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/math_constants.hpp"
#include "kernels/fwd/epilogue.cuh"
#include "kernels/fwd/mainloop.cuh"
#include "kernels/fwd/mask.cuh"
#include "kernels/fwd/softmax.cuh"
#include "kernels/fwd/tile_scheduler.cuh"
#include "kernels/fwd/traits.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/setmaxnreg.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"

namespace hopattn::kernels::fwd {

// `load(w, t)` for every tile the producer loads, in the scheduler's order: the tiles with rows
// and KV blocks (the consumers write zeros for the others). Every loading warp walks these.
template <class Traits, class Scheduler, class Load>
__device__ void for_each_loaded_tile(const FwdParams& p, Load&& load) {
  for (Scheduler sched(p); sched.valid(); sched.advance()) {
    const WorkTile w = sched.tile();
    const TileInfo t = sched.template info<Traits>(p, w);
    if (t.has_rows() && t.n_blocks() > 0) load(w, t);
  }
}

// The producer thread (thread 0); kPagedTma: all of warp 0, lane 0 leading, Q and K only
// (FwdMainloop::load_tile; V comes from warp 1, run_v_producer). kPagedGather: K and V come from
// the gather warps, which this thread feeds with one job per KV block (kv_loader.cuh).
template <class Traits, class Scheduler, KVSource kSource>
__device__ void run_producer(const FwdParams& p, const SharedPlan<Traits>& sm) {
  using Mainloop = FwdMainloop<Traits>;
  constexpr bool kGather = kSource == KVSource::kPagedGather;
  ptx::prefetch_tensor_map(&p.tm_q);
  if (!kGather) {
    ptx::prefetch_tensor_map(&p.tm_k);
    ptx::prefetch_tensor_map(&p.tm_v);
  }
  typename Mainloop::ProducerState st;
  for_each_loaded_tile<Traits, Scheduler>(p, [&](const WorkTile& w, const TileInfo& t) {
    Mainloop::template load_tile<kSource, /*kWithV=*/kSource != KVSource::kPagedTma>(p, sm, w, t,
                                                                                     st);
  });
  if (kGather || kSource == KVSource::kPagedTmaWiden) Mainloop::finish_jobs(sm, st);
  if (kSource == KVSource::kPagedTmaWiden) {  // the whole warp
    __syncwarp();
    if (threadIdx.x == 0) KVLoader<Traits>::report_bad_page(p, sm.bad_page_note(0));
  }
}

// kPagedTma, producer warp 1: V's page boxes of every tile warp 0 loads K of (the two warps
// issue a block's boxes side by side), its page ids checked for the report, recorded once after
// the last tile.
template <class Traits, class Scheduler>
__device__ void run_v_producer(const FwdParams& p, const SharedPlan<Traits>& sm) {
  using Mainloop = FwdMainloop<Traits>;
  ptx::prefetch_tensor_map(&p.tm_v);
  typename Mainloop::Pipeline kv;
  for_each_loaded_tile<Traits, Scheduler>(
      p, [&](const WorkTile& w, const TileInfo& t) { Mainloop::load_tile_v(p, sm, w, t, kv); });
  __syncwarp();
  if (ptx::lane_id() == 0) KVLoader<Traits>::report_bad_page(p, sm.bad_page_note(1));
}

// The scales of tile w's logits and output: the host's (a per-tensor k scale folded in), with
// the per-head KV scales of its KV head when the call has them (KVScaleParams). kKVScales false
// (a scheduler whose calls have no KV scales): the host's logit scales and 1, constants the
// compiler folds, so that those kernels carry neither the loads nor the multiplies.
struct TileScales {
  float scale_log2, softcap_scale, v;
};
template <bool kKVScales>
__device__ inline TileScales tile_scales(const FwdParams& p, const WorkTile& w) {
  if constexpr (!kKVScales) return TileScales{p.softmax.scale_log2, p.softmax.softcap_scale, 1.f};
  TileScales s{p.softmax.scale_log2, p.softmax.softcap_scale, p.kv_scale.v};
  const int kv_head = w.head / p.kv_head_divisor;
  if (p.kv_scale.k_per_head != nullptr) {
    const float k = p.kv_scale.k_per_head[kv_head];
    // With a softcap the scale inside the tanh carries it (scale_log2 is log2(e) x softcap).
    if (s.softcap_scale != 0.f) {
      s.softcap_scale *= k;
    } else {
      s.scale_log2 *= k;
    }
  }
  if (p.kv_scale.v_per_head != nullptr) s.v = p.kv_scale.v_per_head[kv_head];
  return s;
}

template <class Traits, class Scheduler>
__device__ void run_consumer(const FwdParams& p, const SharedPlan<Traits>& sm, int consumer) {
  using Mainloop = FwdMainloop<Traits>;
  using Epilogue = FwdEpilogue<Traits>;
  // Consumer 0 takes the first GEMM turn, handed over by the last one (mainloop.cuh turn_end).
  if (consumer == Traits::kConsumerWarpgroups - 1) Mainloop::turn_end(consumer);
  typename Mainloop::ConsumerState st;
  for (Scheduler sched(p); sched.valid(); sched.advance()) {
    const WorkTile w = sched.tile();
    const TileInfo t = sched.template info<Traits, /*kReport=*/true>(p, w, sm.index_note());
    if (!t.has_rows()) continue;
    float o[Traits::kORegs];
#pragma unroll
    for (int i = 0; i < Traits::kORegs; ++i) o[i] = 0.f;
    const TileScales scales = tile_scales<Scheduler::kKVScales>(p, w);
    OnlineSoftmax<Traits::kSRegs> softmax(scales.scale_log2);
    if (t.n_blocks() > 0) {
      Mainloop::compute_tile(p, sm, w, t, consumer, st, o, softmax, scales.softcap_scale);
    }
    float sink_log2[2] = {-INFINITY, -INFINITY};
    // A KV split's partial state leaves the sink out: the merge counts it once (batch/merge.cuh).
    if (p.softmax.sinks != nullptr && w.partial_row < 0) {
      // This thread's two rows (mainloop.cuh); with GQA packing each has its own q head.
      const int tid = static_cast<int>(threadIdx.x) % 128;
      const int row0 = consumer * Traits::kRowsPerConsumer + (tid / 32) * 16 + tid % 32 / 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int head = row_address(p, w, t, row0 + 8 * h).head;
        sink_log2[h] = p.softmax.sinks[head * p.softmax.sinks_stride] * kLog2e;
      }
    }
    float out_scale[2], lse[2];
    softmax.finalize(sink_log2, out_scale, lse);
    out_scale[0] *= scales.v;  // V's scale: O = sum of P (stored V x scale)
    out_scale[1] *= scales.v;
    if (w.partial_row >= 0) {
      Epilogue::store_partial(p, sm, t, w.partial_row, consumer, o, out_scale, lse);
    } else if (Traits::kOInQ && t.n_blocks() == 0) {
      Epilogue::store_empty(p, w, t, consumer, lse);  // the Q buffer is not this tile's
    } else {
      Epilogue::store(p, sm, w, t, consumer, o, out_scale, lse);
    }
  }
  report_index_note(p, sm.index_note());  // thread 128 only: the tile starts' note
  Epilogue::finish();
}

template <class Traits, class Scheduler = LptTileScheduler>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  const SharedPlan<Traits> sm{ptx::align_to_1024(smem_raw)};
  // Warps 1..3 fill the K and V stages: gathered, or widened from codes TMA brought.
  const bool gather = p.kv.source == KVSource::kPagedGather ||
                      (Traits::kFp8KV && p.kv.source == KVSource::kPagedTmaWiden);
  if (threadIdx.x == 0) {
    Scheduler::take_list(p);  // the batch family's CTAs: the work list they run
    // A K or V stage fills by one TMA arrival (+ bytes), or by one cp.async arrival per gather
    // thread.
    const uint32_t kv_arrivals = gather ? Traits::kGatherThreads : 1;
    // Consumer 1 widens V on some tiles and arrives on every other (widen_v_or_arrive).
    const bool consumer_widens_v =
        Traits::kConsumerWidensV && p.kv.source == KVSource::kPagedTmaWiden;
    ptx::mbarrier_init(sm.q_full(), 1);
    ptx::mbarrier_init(sm.q_empty(), Traits::kConsumerThreads);
    for (int s = 0; s < Traits::kStages; ++s) {
      ptx::mbarrier_init(sm.k_full(s), kv_arrivals);
      ptx::mbarrier_init(sm.k_empty(s), Traits::kConsumerThreads);
      ptx::mbarrier_init(sm.v_full(s),
                         kv_arrivals + (consumer_widens_v ? ptx::kWarpgroupThreads : 0));
      ptx::mbarrier_init(sm.v_empty(s), Traits::kConsumerThreads);
      ptx::mbarrier_init(sm.job_full(s), 1);
      if constexpr (Traits::kFp8KV) {  // one TMA arrival (+ bytes) each
        ptx::mbarrier_init(sm.k_raw(s), 1);
        ptx::mbarrier_init(sm.v_raw(s), 1);
      }
    }
    for (int w = 0; w < Traits::kProducerWarps; ++w) *sm.bad_page_note(w) = make_int2(0, 0);
    sm.index_note()->tag = 0u;
  }
  __syncthreads();
  if (!Scheduler::has_list(p)) return;  // a placed batch launch's CTA left its SM to the decodes
  const int warpgroup = ptx::warpgroup_index();
  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<Traits::kProducerRegisters>();
    const int tid = static_cast<int>(threadIdx.x);
    if constexpr (Traits::kFp8KV) {  // codes by TMA or by the gather, widened by warps 1..3
      bool by_tma = false;
      if constexpr (Traits::kTmaCodes) by_tma = p.kv.source == KVSource::kPagedTmaWiden;
      if (tid >= 32) {
        FwdMainloop<Traits>::gather_jobs(p, sm, static_cast<uint32_t>(tid - 32));
      } else if (by_tma) {
        if constexpr (Traits::kTmaCodes) {
          run_producer<Traits, Scheduler, KVSource::kPagedTmaWiden>(p, sm);
        }
      } else if (tid == 0) {
        run_producer<Traits, Scheduler, KVSource::kPagedGather>(p, sm);
      }
    } else if (tid < 32) {
      switch (p.kv.source) {
        case KVSource::kContiguous:
          if (tid == 0) run_producer<Traits, Scheduler, KVSource::kContiguous>(p, sm);
          break;
        case KVSource::kPagedTma:  // the whole warp: Q, and K one lane a page box
                                   // (kv_loader.cuh); warp 1 issues V's boxes
          run_producer<Traits, Scheduler, KVSource::kPagedTma>(p, sm);
          break;
        case KVSource::kPagedGather:
          if (tid == 0) run_producer<Traits, Scheduler, KVSource::kPagedGather>(p, sm);
          break;
        case KVSource::kPagedTmaWiden:  // fp8 instances only (the host never sets it here)
          break;
      }
    } else if (gather) {
      FwdMainloop<Traits>::gather_jobs(p, sm, static_cast<uint32_t>(tid - 32));
    } else if (p.kv.source == KVSource::kPagedTma && tid < 64) {
      run_v_producer<Traits, Scheduler>(p, sm);
    } else if (tid >= 64) {
      // Producer warps 2 and 3: the batch family's side lane, where the scheduler has one.
      if constexpr (Scheduler::kSideLane) Scheduler::template run_side_lane<Traits>(p, sm);
    }
  } else {
    ptx::setmaxnreg_inc<Traits::kConsumerRegisters>();
    run_consumer<Traits, Scheduler>(p, sm, warpgroup - 1);
  }
}

}  // namespace hopattn::kernels::fwd
