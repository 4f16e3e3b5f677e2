// The bwd configurations as traits types: the rows of the fwd family's table
// (../fwd/configs.hpp), whose (Dqk, Dv) pairs the backward is built for too, in bf16 and fp16;
// the declaration of their launch and the dispatch over the table. The launch is defined in
// launch_kernel.cuh and explicitly instantiated per row in launch_hd*.cu; callers see the
// declaration only, so that no extern list repeats the table.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "hopattn/dtype.hpp"
#include "kernels/bwd/traits.cuh"
#include "kernels/fwd/configs.hpp"

namespace hopattn::kernels::bwd {

// The traits of row kIndex of the fwd configuration table in dtype Elt.
template <class Elt, int kIndex>
using BwdConfigTraits = BwdTraits<Elt, fwd::kFwdConfigs[kIndex].dqk, fwd::kFwdConfigs[kIndex].dv>;

// The row (kDqk, kDv) in dtype Elt (a compile error when that pair is not in the table).
template <class Elt, int kDqk, int kDv = kDqk>
using BwdBuilt = BwdConfigTraits<Elt, fwd::fwd_config_index(kDqk, kDv)>;

// Launches the main bwd kernel of configuration Traits; returns the launch error (cudaSuccess
// when queued). grid: 1-D, KV blocks x Hkv x B CTAs (BwdParams::order maps blockIdx.x to one).
template <class Traits>
cudaError_t launch_kernel(const BwdParams& params, dim3 grid, cudaStream_t stream);

// Calls f(Traits{}) (a value of the traits type: it has no state) with the traits of the row
// (dqk, dv) in bf16 (dtype kBF16) or fp16 (any other dtype: check_supported has refused the rest);
// false, calling nothing, when the pair is not built.
template <int kIndex = 0, class F>
bool visit_config(int64_t dqk, int64_t dv, DType dtype, F&& f) {
  if constexpr (kIndex == fwd::kNumFwdConfigs) {
    return false;
  } else {
    if (fwd::kFwdConfigs[kIndex].dqk == dqk && fwd::kFwdConfigs[kIndex].dv == dv) {
      if (dtype == DType::kBF16) {
        f(BwdConfigTraits<__nv_bfloat16, kIndex>{});
      } else {
        f(BwdConfigTraits<__half, kIndex>{});
      }
      return true;
    }
    return visit_config<kIndex + 1>(dqk, dv, dtype, f);
  }
}

}  // namespace hopattn::kernels::bwd
