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

// The traits of row kIndex of a configuration table (kFwdConfigs or kFwdWideConfigs) in dtype
// Elt (kFp8KV: over an fp8 e4m3 paged cache, the batch family's rows only).
template <class Elt, const FwdConfig* kTable, int kIndex, bool kFp8KV = false>
using FwdRowTraits =
    FwdTraits<Elt, kTable[kIndex].dqk, kTable[kIndex].dv, kTable[kIndex].block_n,
              kTable[kIndex].stages, kTable[kIndex].o_in_q, kFp8KV, kTable[kIndex].consumers>;

template <class Elt, int kIndex, bool kFp8KV = false>
using FwdConfigTraits = FwdRowTraits<Elt, kFwdConfigs, kIndex, kFp8KV>;

// The row (kDqk, kDv) in dtype Elt (a compile error when that pair is not in the table).
template <class Elt, int kDqk, int kDv = kDqk, bool kFp8KV = false>
using FwdBuilt = FwdConfigTraits<Elt, fwd_config_index(kDqk, kDv), kFp8KV>;

// The wide row (kDqk, kDv) in dtype Elt (a compile error when that pair has none).
template <class Elt, int kDqk, int kDv = kDqk>
using FwdWideBuilt = FwdRowTraits<Elt, kFwdWideConfigs, fwd_wide_config_index(kDqk, kDv)>;

// Launches the fwd kernel of configuration Traits walking the tiles of Scheduler; returns the
// launch error (cudaSuccess when queued).
template <class Traits, class Scheduler = LptTileScheduler>
cudaError_t launch_kernel(const FwdParams& params, int grid, cudaStream_t stream);

// The type a dispatch callback receives: Tag::type is the configuration's traits.
template <class Traits>
struct ConfigTag {
  using type = Traits;
};

// Calls f(ConfigTag<Traits>{}) with the traits of row (dqk, dv) of kTable (kCount rows) in
// bf16 (dtype kBF16) or fp16 (any other dtype: check_supported has refused the rest); false,
// calling nothing, when the table has no such row (kBatchOnly: none among the batch family's
// rows). fp8_kv (kBatchOnly only): the instance over an fp8 e4m3 cache.
template <const FwdConfig* kTable, int kCount, bool kBatchOnly, int kIndex = 0, class F>
bool visit_row(int64_t dqk, int64_t dv, DType dtype, F&& f, bool fp8_kv) {
  if constexpr (kIndex == kCount) {
    return false;
  } else if constexpr (kBatchOnly && !kTable[kIndex].batch) {
    return visit_row<kTable, kCount, kBatchOnly, kIndex + 1>(dqk, dv, dtype, std::forward<F>(f),
                                                             fp8_kv);
  } else {
    if (kTable[kIndex].dqk != dqk || kTable[kIndex].dv != dv) {
      return visit_row<kTable, kCount, kBatchOnly, kIndex + 1>(dqk, dv, dtype, std::forward<F>(f),
                                                               fp8_kv);
    }
    const auto visit = [&](auto elt) {
      using Elt = decltype(elt);
      if constexpr (kBatchOnly) {
        if (fp8_kv) {
          f(ConfigTag<FwdRowTraits<Elt, kTable, kIndex, true>>{});
          return;
        }
      }
      f(ConfigTag<FwdRowTraits<Elt, kTable, kIndex>>{});
    };
    if (dtype == DType::kBF16) {
      visit(__nv_bfloat16{});
    } else {
      visit(__half{});
    }
    return true;
  }
}

// visit_row over kFwdConfigs: the configurations every family builds.
template <bool kBatchOnly = false, class F>
bool visit_config(int64_t dqk, int64_t dv, DType dtype, F&& f, bool fp8_kv = false) {
  return visit_row<kFwdConfigs, kNumFwdConfigs, kBatchOnly>(dqk, dv, dtype, std::forward<F>(f),
                                                            fp8_kv);
}

// visit_row over kFwdWideConfigs: the fwd calls' second instances.
template <class F>
bool visit_wide_config(int64_t dqk, int64_t dv, DType dtype, F&& f) {
  return visit_row<kFwdWideConfigs, kNumFwdWideConfigs, false>(dqk, dv, dtype, std::forward<F>(f),
                                                               false);
}

}  // namespace hopattn::kernels::fwd
