// Small-grid decode kernels of head dim 128 (small_kernel.cuh): bf16/fp16 q x every KV format.
#include "kernels/decode/small_launch.cuh"

namespace hopattn::kernels::decode {

HOPATTN_DECODE_SMALL_INSTANTIATE(128);

}  // namespace hopattn::kernels::decode
