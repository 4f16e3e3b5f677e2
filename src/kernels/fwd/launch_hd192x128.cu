// Explicit instantiations of the fwd kernel, head dims (Dqk 192, Dv 128) (a row of configs.hpp).
#include "kernels/fwd/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

HOPATTN_FWD_INSTANTIATE(192, 128, LptTileScheduler);

}  // namespace hopattn::kernels::fwd
