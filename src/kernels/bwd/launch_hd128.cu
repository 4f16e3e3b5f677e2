// Explicit instantiations of the main bwd kernel, head dim 128 (a row of ../fwd/configs.hpp).
#include "kernels/bwd/launch_kernel.cuh"

namespace hopattn::kernels::bwd {

HOPATTN_BWD_INSTANTIATE(128, 128);

}  // namespace hopattn::kernels::bwd
