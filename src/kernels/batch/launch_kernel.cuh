// The fwd kernel walking the batch family's work lists, for the files that instantiate it: one
// batch/launch_hd*.cu per row of fwd/configs.hpp marked batch (so that they compile in
// parallel). batch/launch.cu calls it through fwd/configs.cuh's declaration.
#pragma once

#include "kernels/batch/scheduler.cuh"
#include "kernels/batch/side_lane.cuh"
#include "kernels/fwd/launch_kernel.cuh"

// Instantiates the launch of fwd row (kDqk, kDv) over the work lists (in namespace
// hopattn::kernels::fwd).
#define HOPATTN_BATCH_INSTANTIATE(kDqk, kDv)                                       \
  static_assert(built_for_batch(kDqk, kDv), "not a batch row of fwd/configs.hpp"); \
  HOPATTN_FWD_INSTANTIATE(kDqk, kDv, batch::WorkListScheduler)
// The same over an fp8 e4m3 cache (batch/launch_fp8_hd*.cu).
#define HOPATTN_BATCH_INSTANTIATE_FP8(kDqk, kDv)                                   \
  static_assert(built_for_batch(kDqk, kDv), "not a batch row of fwd/configs.hpp"); \
  HOPATTN_FWD_INSTANTIATE_KV(kDqk, kDv, batch::WorkListScheduler, true)
// The side-lane instance of row (kD, kD), bf16 and fp16 (batch/launch_side_hd*.cu).
#define HOPATTN_BATCH_INSTANTIATE_SIDE(kD)                                                     \
  static_assert(built_for_batch(kD, kD), "not a batch row of fwd/configs.hpp");                \
  template cudaError_t                                                                         \
  launch_kernel<batch::SideLaneTraits<FwdBuilt<__nv_bfloat16, kD>>, batch::SideLaneScheduler>( \
      const FwdParams&, int, cudaStream_t);                                                    \
  template cudaError_t                                                                         \
  launch_kernel<batch::SideLaneTraits<FwdBuilt<__half, kD>>, batch::SideLaneScheduler>(        \
      const FwdParams&, int, cudaStream_t)
