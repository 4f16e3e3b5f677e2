// Decode kernels of head dim 64 (a row of configs.hpp): bf16/fp16 q x every KV format.
#include "kernels/decode/launch_kernel.cuh"

namespace hopattn::kernels::decode {

HOPATTN_DECODE_INSTANTIATE(64);

}  // namespace hopattn::kernels::decode
