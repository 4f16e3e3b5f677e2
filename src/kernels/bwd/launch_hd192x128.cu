// Explicit instantiations of the main bwd kernel, head dims (Dqk 192, Dv 128) (a row of
// ../fwd/configs.hpp).
#include "kernels/bwd/launch_kernel.cuh"

namespace hopattn::kernels::bwd {

HOPATTN_BWD_INSTANTIATE(192, 128);

}  // namespace hopattn::kernels::bwd
