// The MLA kernel, fp16 q over an fp16 cache (a row of configs.hpp).
#include "kernels/mla/launch_kernel.cuh"

namespace hopattn::kernels::mla {

HOPATTN_MLA_INSTANTIATE(DType::kFP16, false);

}  // namespace hopattn::kernels::mla
