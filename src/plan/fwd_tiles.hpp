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

// Whether the wide instance pays: its per-block savings need long walks, and its wider
// diagonal and last blocks cost more than they save below min_keys (configs.hpp states the
// measurements behind each row's floor).
constexpr bool fwd_wide_tiles(int64_t keys_per_tile, int min_keys) {
  return min_keys > 0 && keys_per_tile >= min_keys;
}

}  // namespace hopattn::plan
