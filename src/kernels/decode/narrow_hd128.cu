// Narrow decode kernels of head dim 128 (narrow_kernel.cuh): bf16/fp16 q over a cache of q's dtype.
#include "kernels/decode/narrow_launch.cuh"

namespace hopattn::kernels::decode {

HOPATTN_DECODE_NARROW_INSTANTIATE(128);

}  // namespace hopattn::kernels::decode
