// Explicit instantiations of the batch family's side-lane kernel (side_lane.cuh), head dim 128.
#include "kernels/batch/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

HOPATTN_BATCH_INSTANTIATE_SIDE(128);

}  // namespace hopattn::kernels::fwd
