// Decode kernels of head dim 128: bf16/fp16 q x {native 16-bit, e4m3, e5m2, int8} KV.
#include "kernels/decode/launch_kernel.cuh"

namespace hopattn::kernels::decode {
template cudaError_t launch_for_head_dim<128>(const Params&, bool, KvFormat, int, dim3,
                                              cudaStream_t);
}  // namespace hopattn::kernels::decode
