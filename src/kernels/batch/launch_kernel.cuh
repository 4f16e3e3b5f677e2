// The fwd kernel walking the batch family's work lists, one explicit instantiation per
// configuration in launch_hd*.cu (so that they compile in parallel), declared extern in launch.cu.
#pragma once

#include "kernels/batch/scheduler.cuh"
#include "kernels/fwd/launch_kernel.cuh"

namespace hopattn::kernels::batch {

// The fwd configurations the batch family runs (head dims 64, 128, 256; bf16 and fp16).
using fwd::FwdBf16Hd128;
using fwd::FwdBf16Hd256;
using fwd::FwdBf16Hd64;
using fwd::FwdFp16Hd128;
using fwd::FwdFp16Hd256;
using fwd::FwdFp16Hd64;

}  // namespace hopattn::kernels::batch
