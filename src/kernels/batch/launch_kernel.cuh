// The fwd kernel walking the batch family's work lists, for the files that instantiate it: one
// batch/launch_hd*.cu per row of fwd/configs.hpp marked batch (so that they compile in
// parallel). batch/launch.cu calls it through fwd/configs.cuh's declaration.
#pragma once

#include "kernels/batch/scheduler.cuh"
#include "kernels/fwd/launch_kernel.cuh"

// Instantiates the launch of fwd row (kDqk, kDv) over the work lists (in namespace
// hopattn::kernels::fwd).
#define HOPATTN_BATCH_INSTANTIATE(kDqk, kDv)                                       \
  static_assert(built_for_batch(kDqk, kDv), "not a batch row of fwd/configs.hpp"); \
  HOPATTN_FWD_INSTANTIATE(kDqk, kDv, batch::WorkListScheduler)
