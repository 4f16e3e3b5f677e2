// The small-grid decode kernels (small_kernel.cuh): D = 64 and 128, bf16 and fp16 q over a cache
// of q's dtype (traits.hpp's small_kernel_head_dim; the planner takes them where they fit).
#include "kernels/decode/launch_kernel.cuh"
#include "kernels/decode/small_kernel.cuh"

namespace hopattn::kernels::decode {

namespace {

template <int kHeadDim, class Elt>
cudaError_t launch_small_variant(const Params& p, dim3 grid, cudaStream_t stream) {
  using T = SmallTraits<kHeadDim>;
  constexpr auto kernel = &decode_small_kernel<kHeadDim, Elt>;
  const cudaError_t status = allow_dynamic_smem_once<kernel>(T::smem_bytes());
  if (status != cudaSuccess) return status;
  kernel<<<grid, kThreads, T::smem_bytes(), stream>>>(p);
  return cudaGetLastError();
}

template <int kHeadDim>
cudaError_t launch_small_for(const Params& p, bool bf16, dim3 grid, cudaStream_t stream) {
  static_assert(small_kernel_head_dim(kHeadDim), "a head dim of the small kernel");
  return bf16 ? launch_small_variant<kHeadDim, __nv_bfloat16>(p, grid, stream)
              : launch_small_variant<kHeadDim, __half>(p, grid, stream);
}

}  // namespace

cudaError_t launch_small(const Params& p, int head_dim, bool bf16, dim3 grid,
                         cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return launch_small_for<64>(p, bf16, grid, stream);
    case 128:
      return launch_small_for<128>(p, bf16, grid, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace hopattn::kernels::decode
