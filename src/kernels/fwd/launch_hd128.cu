// Explicit instantiations of the fwd kernel, head dim 128 (a row of configs.hpp).
#include "kernels/fwd/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

HOPATTN_FWD_INSTANTIATE(128, 128, LptTileScheduler);

}  // namespace hopattn::kernels::fwd
