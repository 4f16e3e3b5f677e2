// Decode kernels of head dim 256 (a row of configs.hpp): bf16/fp16 q x every KV format.
#include "kernels/decode/launch_kernel.cuh"

namespace hopattn::kernels::decode {

HOPATTN_DECODE_INSTANTIATE(256);

}  // namespace hopattn::kernels::decode
