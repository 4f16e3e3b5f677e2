// The MLA kernel: one CTA per (row tile, key split, request); a producer warpgroup streams the
// split's KV blocks through a two-stage ring while two consumer warpgroups run the GEMMs and the
// online softmax (consumer.cuh), then each consumer stores its 256 output columns (or its
// float32 partial state when the keys are split, merged by a second launch).
#pragma once

#include <cstdint>

#include "kernels/common/o_panels.cuh"
#include "kernels/mla/consumer.cuh"
#include "kernels/mla/loader.cuh"
#include "kernels/mla/tile.cuh"
#include "kernels/mla/traits.cuh"
#include "ptx/grid_dependency.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/pack.cuh"
#include "ptx/setmaxnreg.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"

namespace hopattn::kernels::mla {

// Consumer `c`'s rows and columns of O to out (16-bit) or to the split's partial state (fp32);
// consumer 0 also writes the rows' lse. Rows past the tile's valid ones are not written.
// 16-bit out goes through shared memory (common/o_panels.cuh): consumer c's 64 x 256 block is
// staged over Q's panels 4c..4c+3, which no S GEMM reads any more (each schedule's consumers
// reach their epilogue only after the last S of the tile: seesaw.cuh, consumer.cuh), and each
// warp copies its own 16 rows out, one row of 512 contiguous bytes an instruction (so a
// __syncwarp orders the staging, no barrier).
template <class Traits>
__device__ void store_output(const MlaParams& p, uint8_t* q_buffer, const Tile& t, int consumer,
                             const float (&o)[Traits::kORegs], const float (&out_scale)[2],
                             const float (&lse)[2]) {
  using Elt = typename Traits::Elt;
  const bool whole = p.num_splits == 1;
  if (whole) {
    constexpr int kPanelsPerConsumer = Traits::kOCols / Traits::kPanelCols;
    const uint32_t staging = ptx::opaque(ptx::smem_address(q_buffer)) +
                             consumer * kPanelsPerConsumer * Traits::kQPanelBytes;
    stage_o_panels<Elt, Traits::kORegs>(staging, Traits::kQPanelBytes, o, out_scale);
    __syncwarp();
    const int warp_first = (static_cast<int>(threadIdx.x) % 128) / 32 * 16;
    const int col0 = consumer * Traits::kOCols;
    Elt* out = static_cast<Elt*>(p.out);
    store_panel_rows<Elt, Traits::kOCols>(
        staging + warp_first * kOPanelRowBytes, Traits::kQPanelBytes, min(16, t.rows - warp_first),
        static_cast<int>(threadIdx.x) % 32, 32, [&](int r) {
          const Tile::RowPosition at = t.position(p, warp_first + r);
          return out + at.q_row(t) * p.out_stride[0] + at.head * p.out_stride[1] + col0;
        });
  }
  // The thread's two rows: their lse, and with split keys their fp32 partial state.
  const int r0 = MlaConsumer<Traits>::row0();
  const int col0 = consumer * Traits::kOCols + 2 * (static_cast<int>(threadIdx.x) % 4);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    if (r >= t.rows) continue;
    const Tile::RowPosition at = t.position(p, r);
    const bool lse_lane = consumer == 0 && threadIdx.x % 4 == 0;
    if (whole) {
      if (lse_lane) p.lse[at.q_row(t) * p.lse_stride[0] + at.head * p.lse_stride[1]] = lse[h];
      continue;
    }
    const int64_t state = (t.split * p.total_q + at.q_row(t)) * p.heads + at.head;
    const float f = out_scale[h];
    float* row = p.partial_o + state * kLatentDim + col0;
#pragma unroll
    for (int j = 0; j < Traits::kORegs / 4; ++j) {
      *reinterpret_cast<float2*>(row + 8 * j) =
          make_float2(o[4 * j + 2 * h] * f, o[4 * j + 2 * h + 1] * f);
    }
    if (lse_lane) p.partial_lse[state] = lse[h];
  }
}

// Thread 0 of the producer warpgroup fetches the cache's TMA descriptors ahead of their first
// use.
__device__ __forceinline__ void prefetch_tensor_maps(const MlaParams& p, int role) {
  if (role == 0 && threadIdx.x == 0 && p.tma) {
    ptx::prefetch_tensor_map(&p.tm_ckv);
    ptx::prefetch_tensor_map(&p.tm_kpe);
  }
}

// Warpgroup 0 of every schedule is the producer: the tensor maps are prefetched by it, it gives
// registers up and runs Loader over the tile. Returns whether this thread was one of it (and so
// is done).
template <class Traits, class Loader, class Plan>
__device__ bool run_producer(const MlaParams& p, const Plan& sm, const Tile& t) {
  const int role = ptx::warpgroup_index();
  prefetch_tensor_maps(p, role);
  if (role != 0) return false;
  ptx::setmaxnreg_to<Traits::kProducerRegisters, Traits::kLaunchRegisters>();
  Loader::run(p, sm, t);
  return true;
}

// The cache's dequantization scale of V (1 for 16-bit caches without kv_scale) folds into the
// rows' final scales; then store_output.
template <class Traits>
__device__ void finish_output(const MlaParams& p, uint8_t* q_buffer, const Tile& t, int consumer,
                              const float (&o)[Traits::kORegs], float (&out_scale)[2],
                              const float (&lse)[2]) {
  out_scale[0] *= p.v_scale;
  out_scale[1] *= p.v_scale;
  store_output<Traits>(p, q_buffer, t, consumer, o, out_scale, lse);
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    mla_kernel(const __grid_constant__ MlaParams p) {
  extern __shared__ uint8_t smem_raw[];
  const SharedPlan<Traits> sm{ptx::align_to_1024(smem_raw)};
  // Launched as a programmatic dependent (programmatic_launch.cuh): everything below may read
  // what the kernel before wrote. The split merge after this kernel (launch.cu) may launch once
  // every CTA is running; it waits for this grid's completion before it reads a partial state.
  ptx::begin_dependent_grid();
  const Tile t = make_tile<Traits::kBlockKeys>(p);
  if (t.rows == 0) return;  // uniform over the CTA: past the request's rows

  if (threadIdx.x == 0) {
    for (int s = 0; s < Traits::kStages; ++s) {
      ptx::mbarrier_init(sm.full(s), 128);  // one cp.async arrival per producer thread
      ptx::mbarrier_init(sm.empty(s), Traits::kConsumerThreads);
    }
    ptx::mbarrier_init(sm.p_full(), 128);
    ptx::mbarrier_init(sm.p_empty(), 128);
    ptx::mbarrier_init(sm.final_ready(), 128);
  }
  __syncthreads();

  if (run_producer<Traits, MlaLoader<Traits>>(p, sm, t)) return;
  const int role = ptx::warpgroup_index();
  // Both consumer warpgroups load Q through one copy of the code: its bar.sync (an aligned
  // barrier) must be one instruction for all 256 threads; a copy in each role's branch gave two
  // (compute-sanitizer synccheck: "Divergent thread(s) in block").
  MlaConsumer<Traits>::load_q(p, sm, t);
  float o[Traits::kORegs];
  float out_scale[2], lse[2];
  if (role == 1) {
    ptx::setmaxnreg_to<Traits::kConsumer0Registers, Traits::kLaunchRegisters>();
    MlaConsumer<Traits>::run0(p, sm, t, o, out_scale, lse);
  } else {
    ptx::setmaxnreg_to<Traits::kConsumer1Registers, Traits::kLaunchRegisters>();
    MlaConsumer<Traits>::run1(p, sm, t, o, out_scale);
    lse[0] = lse[1] = 0.f;  // consumer 0 writes the lse
  }
  finish_output<Traits>(p, sm.q(), t, role - 1, o, out_scale, lse);
}

}  // namespace hopattn::kernels::mla
