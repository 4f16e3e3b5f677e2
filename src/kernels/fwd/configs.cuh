// The fwd configurations as traits types (rows of configs.hpp's table in bf16 and fp16), the
// declaration of their launch and the dispatch over the table. The launch is defined in
// launch_kernel.cuh and explicitly instantiated per row in launch_hd*.cu (batch/launch_hd*.cu
// for the batch family's scheduler); callers see the declaration only, so that no extern list
// repeats the table.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "hopattn/dtype.hpp"
#include "kernels/fwd/configs.hpp"
#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::fwd {

class LptTileScheduler;

// The traits of row kIndex of the configuration table in dtype Elt.
template <class Elt, int kIndex>
using FwdConfigTraits =
    FwdTraits<Elt, kFwdConfigs[kIndex].dqk, kFwdConfigs[kIndex].dv, kFwdConfigs[kIndex].block_n,
              kFwdConfigs[kIndex].stages, kFwdConfigs[kIndex].o_in_q>;

// The row (kDqk, kDv) in dtype Elt (a compile error when that pair is not in the table).
template <class Elt, int kDqk, int kDv = kDqk>
using FwdBuilt = FwdConfigTraits<Elt, fwd_config_index(kDqk, kDv)>;

// Launches the fwd kernel of configuration Traits walking the tiles of Scheduler; returns the
// launch error (cudaSuccess when queued).
template <class Traits, class Scheduler = LptTileScheduler>
cudaError_t launch_kernel(const FwdParams& params, int grid, cudaStream_t stream);

// The type a dispatch callback receives: Tag::type is the configuration's traits.
template <class Traits>
struct ConfigTag {
  using type = Traits;
};

// Calls f(ConfigTag<Traits>{}) with the traits of the row (dqk, dv) in bf16 (dtype kBF16) or
// fp16 (any other dtype: check_supported has refused the rest); false, calling nothing, when
// the pair is not built (kBatchOnly: not among the batch family's rows).
template <bool kBatchOnly = false, int kIndex = 0, class F>
bool visit_config(int64_t dqk, int64_t dv, DType dtype, F&& f) {
  if constexpr (kIndex == kNumFwdConfigs) {
    return false;
  } else if constexpr (kBatchOnly && !kFwdConfigs[kIndex].batch) {
    return visit_config<kBatchOnly, kIndex + 1>(dqk, dv, dtype, std::forward<F>(f));
  } else {
    if (kFwdConfigs[kIndex].dqk != dqk || kFwdConfigs[kIndex].dv != dv) {
      return visit_config<kBatchOnly, kIndex + 1>(dqk, dv, dtype, std::forward<F>(f));
    }
    if (dtype == DType::kBF16) {
      f(ConfigTag<FwdConfigTraits<__nv_bfloat16, kIndex>>{});
    } else {
      f(ConfigTag<FwdConfigTraits<__half, kIndex>>{});
    }
    return true;
  }
}

}  // namespace hopattn::kernels::fwd
