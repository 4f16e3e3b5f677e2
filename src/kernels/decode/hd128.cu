// Decode kernels of head dim 128 (a row of configs.hpp): bf16/fp16 q x every KV format.
#include "kernels/decode/launch_kernel.cuh"

namespace hopattn::kernels::decode {

HOPATTN_DECODE_INSTANTIATE(128);

}  // namespace hopattn::kernels::decode
