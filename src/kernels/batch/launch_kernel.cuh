// The fwd kernel walking the batch family's work lists, one explicit instantiation per
// configuration in launch_hd*.cu (so that they compile in parallel), declared extern in launch.cu.
#pragma once

#include "kernels/batch/scheduler.cuh"
#include "kernels/fwd/launch_kernel.cuh"

namespace hopattn::kernels::batch {

// The fwd configurations the batch family runs (head dims 64, 128, 256; bf16 and fp16). A step's
// decode items stream their keys from HBM, one KV head per 128-row tile, so the KV ring is as
// deep as shared memory allows: at head dim 128 three stages of 96-key blocks (208 KB with Q and
// the O staging) rather than the fwd family's two of 128, at 64 three of 128. Head dim 256 keeps
// the fwd family's two stages of 80 keys with O staged in Q (nothing deeper fits).
using BatchBf16Hd64 = fwd::FwdTraits<__nv_bfloat16, 64, 64, 128, 3>;
using BatchFp16Hd64 = fwd::FwdTraits<__half, 64, 64, 128, 3>;
using BatchBf16Hd128 = fwd::FwdTraits<__nv_bfloat16, 128, 128, 96, 3>;
using BatchFp16Hd128 = fwd::FwdTraits<__half, 128, 128, 96, 3>;
using BatchBf16Hd256 = fwd::FwdBf16Hd256;
using BatchFp16Hd256 = fwd::FwdFp16Hd256;

}  // namespace hopattn::kernels::batch
