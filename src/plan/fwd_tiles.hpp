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
// fewer, longer tiles' imbalance under a growing diagonal (causal) only where the host can
// choose their walk: dense calls, whose walk plan/fwd_walk_replay.hpp picks (H100, hd64 causal
// 512-16k, 32 heads and 32:8 GQA: 0.83-0.99x the base tiles' time with the replay's walk, 1.00-
// 1.05x with the plain walk where pairing was the better one). Varlen calls (lengths the host
// does not see) keep the base tiles.
constexpr bool fwd_wide_tiles(int64_t keys_per_tile, int min_keys, bool more_rows, bool growing,
                              bool dense) {
  if (keys_per_tile < min_keys) return false;
  return !more_rows || !growing || dense;
}

}  // namespace hopattn::plan
