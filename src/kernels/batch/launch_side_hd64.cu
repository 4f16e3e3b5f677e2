// Explicit instantiations of the batch family's side-lane kernel (side_lane.cuh), head dim 64.
#include "kernels/batch/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

HOPATTN_BATCH_INSTANTIATE_SIDE(64);

}  // namespace hopattn::kernels::fwd
