// Which KV tile a fwd call runs: the base row of kernels/fwd/configs.hpp or its wide-tile
// instance (kFwdWideConfigs), from the keys one tile walks. Pure C++ (no CUDA), tested on the CPU.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hopattn::plan {

// Keys a tile of block_m query rows walks: the longest request's max_seqlen_k, or, under a
// window bounded on both sides (window_right already 0 for causal), the window's span around
// the tile where that is shorter. A window open on either side leaves max_seqlen_k.
constexpr int64_t fwd_keys_per_tile(int64_t max_seqlen_k, int64_t window_left, int64_t window_right,
                                    int block_m) {
  if (window_left < 0 || window_right < 0) return max_seqlen_k;
  return std::min(max_seqlen_k, window_left + window_right + block_m);
}

// Whether the wide instance pays (configs.hpp states the measurements behind each row): a row of
// wider KV tiles needs walks of at least min_keys keys (its per-block savings against its wider
// diagonal and last blocks). A row of more query rows a tile (192: three consumers) halves
// fewer, longer tiles' imbalance only when the walk pairs them: under a growing diagonal
// (causal) the plain static walk of 192-row tiles put its busiest CTA at 1.21-1.35x the mean
// (tools/fwd_walk_replay.py at 2k-16k, hd64) against 1.03-1.06x paired, and lost more than the
// tiles gained (H100: 16k causal 1.05x slower unpaired, 4k 1.13x faster paired).
constexpr bool fwd_wide_tiles(int64_t keys_per_tile, int min_keys, bool more_rows, bool growing,
                              bool paired) {
  if (keys_per_tile < min_keys) return false;
  return !more_rows || !growing || paired;
}

}  // namespace hopattn::plan
