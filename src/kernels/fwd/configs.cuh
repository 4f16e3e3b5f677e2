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

// The traits of row kIndex of the configuration table in dtype Elt (kFp8KV: over an fp8 e4m3
// paged cache, the batch family's rows only).
template <class Elt, int kIndex, bool kFp8KV = false>
using FwdConfigTraits =
    FwdTraits<Elt, kFwdConfigs[kIndex].dqk, kFwdConfigs[kIndex].dv, kFwdConfigs[kIndex].block_n,
              kFwdConfigs[kIndex].stages, kFwdConfigs[kIndex].o_in_q, kFp8KV>;

// The row (kDqk, kDv) in dtype Elt (a compile error when that pair is not in the table).
template <class Elt, int kDqk, int kDv = kDqk, bool kFp8KV = false>
using FwdBuilt = FwdConfigTraits<Elt, fwd_config_index(kDqk, kDv), kFp8KV>;

// The traits of row kIndex of the wide-tile table (kFwdWideConfigs) in dtype Elt.
template <class Elt, int kIndex>
using FwdWideConfigTraits =
    FwdTraits<Elt, kFwdWideConfigs[kIndex].dqk, kFwdWideConfigs[kIndex].dv,
              kFwdWideConfigs[kIndex].block_n, kFwdWideConfigs[kIndex].stages,
              kFwdWideConfigs[kIndex].o_in_q, false, kFwdWideConfigs[kIndex].consumers>;

// The wide row (kDqk, kDv) in dtype Elt (a compile error when that pair has none).
template <class Elt, int kDqk, int kDv = kDqk>
using FwdWideBuilt = FwdWideConfigTraits<Elt, fwd_wide_config_index(kDqk, kDv)>;

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
// the pair is not built (kBatchOnly: not among the batch family's rows). fp8_kv (kBatchOnly
// only): the instance over an fp8 e4m3 cache.
template <bool kBatchOnly = false, int kIndex = 0, class F>
bool visit_config(int64_t dqk, int64_t dv, DType dtype, F&& f, bool fp8_kv = false) {
  if constexpr (kIndex == kNumFwdConfigs) {
    return false;
  } else if constexpr (kBatchOnly && !kFwdConfigs[kIndex].batch) {
    return visit_config<kBatchOnly, kIndex + 1>(dqk, dv, dtype, std::forward<F>(f), fp8_kv);
  } else {
    if (kFwdConfigs[kIndex].dqk != dqk || kFwdConfigs[kIndex].dv != dv) {
      return visit_config<kBatchOnly, kIndex + 1>(dqk, dv, dtype, std::forward<F>(f), fp8_kv);
    }
    const auto visit = [&](auto elt) {
      using Elt = decltype(elt);
      if constexpr (kBatchOnly) {
        if (fp8_kv) {
          f(ConfigTag<FwdConfigTraits<Elt, kIndex, true>>{});
          return;
        }
      }
      f(ConfigTag<FwdConfigTraits<Elt, kIndex>>{});
    };
    if (dtype == DType::kBF16) {
      visit(__nv_bfloat16{});
    } else {
      visit(__half{});
    }
    return true;
  }
}

// Calls f(ConfigTag<Traits>{}) with the traits of the wide row (dqk, dv) in bf16 or fp16 as
// visit_config does; false, calling nothing, when the pair has no wide instance.
template <int kIndex = 0, class F>
bool visit_wide_config(int64_t dqk, int64_t dv, DType dtype, F&& f) {
  if constexpr (kIndex == kNumFwdWideConfigs) {
    return false;
  } else {
    if (kFwdWideConfigs[kIndex].dqk != dqk || kFwdWideConfigs[kIndex].dv != dv) {
      return visit_wide_config<kIndex + 1>(dqk, dv, dtype, std::forward<F>(f));
    }
    if (dtype == DType::kBF16) {
      f(ConfigTag<FwdWideConfigTraits<__nv_bfloat16, kIndex>>{});
    } else {
      f(ConfigTag<FwdWideConfigTraits<__half, kIndex>>{});
    }
    return true;
  }
}

}  // namespace hopattn::kernels::fwd
