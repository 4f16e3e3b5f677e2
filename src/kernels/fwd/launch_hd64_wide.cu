// Explicit instantiations of the fwd kernel's wide-KV-tile instance, head dim 64 (a row of
// configs.hpp's kFwdWideConfigs; its own file so that it builds beside launch_hd64.cu).
#include "kernels/fwd/launch_kernel.cuh"

namespace hopattn::kernels::fwd {

HOPATTN_FWD_INSTANTIATE_WIDE(64, 64, LptTileScheduler);

}  // namespace hopattn::kernels::fwd
