// Explicit instantiations of the batch family's work-list fwd kernel over an fp8 e4m3 cache,
// head dim 256 (a file of its own, so that it compiles in parallel with the 16-bit instances).
#include "kernels/batch/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

HOPATTN_BATCH_INSTANTIATE_FP8(256, 256);

}  // namespace hopattn::kernels::fwd
