// The MLA configurations as traits types (rows of configs.hpp's table), the declaration of their
// launch and the dispatch over the table. The launch is defined in launch_kernel.cuh and
// explicitly instantiated per row in kernel_*.cu; callers see the declaration only, so that no
// extern list repeats the table.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

#include "kernels/mla/configs.hpp"
#include "kernels/mla/narrow_traits.cuh"
#include "kernels/mla/seesaw_traits.cuh"
#include "kernels/mla/traits.cuh"

namespace hopattn::kernels::mla {

// The traits of row kIndex of the configuration table (the one-S-consumer schedule); a 16-bit
// row has the seesaw schedule's traits as well (SeesawOf), and every row the narrow schedule's
// (NarrowOf); the plan picks one (mla_plan.hpp).
template <int kIndex>
using MlaConfigTraits =
    MlaTraits<std::conditional_t<kMlaConfigs[kIndex].q == DType::kBF16, __nv_bfloat16, __half>,
              kMlaConfigs[kIndex].fp8_cache>;
template <class Traits>
using SeesawOf = SeesawTraits<typename Traits::Elt>;
// The narrow schedule's traits of a row (any cache format), for requests of <= kCols rows (16;
// 32 only over an fp8 cache).
template <class Traits, int kCols = plan::mla::kNarrowRows>
using NarrowOf = NarrowTraits<typename Traits::Elt, Traits::kFp8Cache, kCols>;

// The row (q dtype kQ, fp8 cache or not) (a compile error when it is not in the table).
template <DType kQ, bool kFp8Cache>
using MlaBuilt = MlaConfigTraits<mla_config_index(kQ, kFp8Cache ? DType::kFP8E4M3 : kQ)>;

// Launches the MLA kernel of configuration Traits; returns the launch error (cudaSuccess when
// queued).
template <class Traits>
cudaError_t launch_kernel(const MlaParams& params, dim3 grid, cudaStream_t stream);

// The type a dispatch callback receives: Tag::type is the configuration's traits.
template <class Traits>
struct ConfigTag {
  using type = Traits;
};

// Calls f(ConfigTag<Traits>{}) with the traits of the row (q, cache); false, calling nothing,
// when that pair is not built.
template <int kIndex = 0, class F>
bool visit_config(DType q, DType cache, F&& f) {
  if constexpr (kIndex == kNumMlaConfigs) {
    return false;
  } else {
    if (kMlaConfigs[kIndex].q != q || cache_dtype(kMlaConfigs[kIndex]) != cache) {
      return visit_config<kIndex + 1>(q, cache, std::forward<F>(f));
    }
    f(ConfigTag<MlaConfigTraits<kIndex>>{});
    return true;
  }
}

}  // namespace hopattn::kernels::mla
