// The MLA kernel, bf16 q over an fp8 e4m3 cache (a row of configs.hpp).
#include "kernels/mla/launch_kernel.cuh"

namespace hopattn::kernels::mla {

HOPATTN_MLA_INSTANTIATE(DType::kBF16, true);

}  // namespace hopattn::kernels::mla
