// Explicit instantiations of the batch family's work-list fwd kernel, head dim 256 (a row of
// fwd/configs.hpp marked batch).
#include "kernels/batch/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

HOPATTN_BATCH_INSTANTIATE(256, 256);

}  // namespace hopattn::kernels::fwd
