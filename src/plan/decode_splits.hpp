// The split heuristic of the decode kernel: how many CTAs share the keys of one (request, KV head,
// row tile) problem. Plain C++ (no CUDA), so the CPU tests check it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/decode/traits.hpp"

namespace hopattn::plan {

// Cost model, in units of one 64-key tile streamed by one CTA. A launch of `ctas` CTAs over
// `slots` resident CTA slots runs ceil(ctas / slots) waves, and a wave lasts as long as its
// longest CTA: its tiles plus a fixed cost (the pipeline fill: two dependent global round trips
// for the lengths and the page table before the first KV byte arrives; the epilogue). Splitting
// adds the partials and the merge once. So a wave's tail is paid in full: B = 8 x 8 KV heads =
// 64 problems on 264 slots takes 4 splits (256 CTAs, one wave), not ceil(264 / 64) = 5 (320 CTAs,
// 1.2 waves, the second wave as long as the first).
inline constexpr int64_t kDecodeCtaFixedTiles = 2;
inline constexpr int64_t kDecodeSplitMergeTiles = 2;

inline int64_t decode_split_cost(int64_t problems, int64_t tiles, int64_t slots, int64_t splits) {
  const int64_t waves = (problems * splits + slots - 1) / slots;
  const int64_t tiles_per_cta = (tiles + splits - 1) / splits;
  return waves * (tiles_per_cta + kDecodeCtaFixedTiles) + (splits > 1 ? kDecodeSplitMergeTiles : 0);
}

// Splits for `problems` problems whose longest possible sequence has `max_kv_len` keys, on
// `slots` resident CTAs (SMs x CTAs per SM): the split count of least modelled time (the smaller
// on ties: fewer partials to merge), at most kMaxAutoSplits and never fewer than
// kMinTilesPerSplit tiles per split of the longest sequence.
inline int choose_decode_splits(int64_t problems, int64_t max_kv_len, int64_t slots) {
  namespace tile = kernels::decode;
  if (problems <= 0 || slots <= 0 || max_kv_len <= 0) return 1;
  const int64_t tiles = (max_kv_len + tile::kTileTokens - 1) / tile::kTileTokens;
  const int64_t most =
      std::clamp<int64_t>(tiles / tile::kMinTilesPerSplit, 1, tile::kMaxAutoSplits);
  int64_t best = 1, best_cost = decode_split_cost(problems, tiles, slots, 1);
  for (int64_t s = 2; s <= most; ++s) {
    const int64_t cost = decode_split_cost(problems, tiles, slots, s);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return static_cast<int>(best);
}

}  // namespace hopattn::plan
