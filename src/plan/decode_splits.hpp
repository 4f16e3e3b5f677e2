// The split heuristic of the decode kernel: how many CTAs share the keys of one (request, KV head,
// row tile) problem. Plain C++ (no CUDA), so the CPU tests check it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/decode/traits.hpp"
#include "plan/split_cost.hpp"

namespace hopattn::plan {

// The wave cost model (split_cost.hpp) in units of one 64-key tile streamed by one CTA. The fixed
// cost of a CTA is the pipeline fill (two dependent global round trips for the lengths and the page
// table before the first KV byte arrives) and the epilogue. So a wave's tail is paid in full:
// B = 8 x 8 KV heads = 64 problems on 264 slots takes 4 splits (256 CTAs, one wave), not
// ceil(264 / 64) = 5 (320 CTAs, 1.2 waves, the second wave as long as the first).
inline constexpr SplitCostModel kDecodeSplitCost{
    /*cta_fixed_tiles=*/2, /*split_merge_tiles=*/2,
    /*max_splits=*/kernels::decode::kMaxAutoSplits,
    /*min_tiles_per_split=*/kernels::decode::kMinTilesPerSplit};

// Splits for `problems` problems whose longest possible sequence has `max_kv_len` keys, on
// `slots` resident CTAs (SMs x CTAs per SM): the split count of least modelled time (the smaller
// on ties: fewer partials to merge).
inline int choose_decode_splits(int64_t problems, int64_t max_kv_len, int64_t slots) {
  if (max_kv_len <= 0) return 1;
  const int64_t tile = kernels::decode::kTileTokens;
  return kDecodeSplitCost.choose(problems, (max_kv_len + tile - 1) / tile, slots);
}

}  // namespace hopattn::plan
