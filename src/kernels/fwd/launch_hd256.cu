// Explicit instantiations of the fwd kernel, head dim 256 (a row of configs.hpp).
#include "kernels/fwd/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

HOPATTN_FWD_INSTANTIATE(256, 256, LptTileScheduler);

}  // namespace hopattn::kernels::fwd
