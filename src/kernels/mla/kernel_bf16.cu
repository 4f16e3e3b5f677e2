// The MLA kernel, bf16 q over a bf16 cache (a row of configs.hpp).
#include "kernels/mla/launch_kernel.cuh"

namespace hopattn::kernels::mla {

HOPATTN_MLA_INSTANTIATE(DType::kBF16, false);

}  // namespace hopattn::kernels::mla
