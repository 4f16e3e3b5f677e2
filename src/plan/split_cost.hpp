// The wave model behind every split-KV choice: how many CTAs share the keys of one problem (a
// request's row tile) so that the grid finishes soonest. Plain C++ (no CUDA), tested on the CPU.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hopattn::plan {

// Costs in units of one KV tile streamed by one CTA. A launch of `ctas` CTAs over `slots`
// resident CTA slots runs ceil(ctas / slots) waves; a wave lasts as long as its longest CTA: its
// tiles plus a fixed cost (pipeline fill, epilogue). Splitting adds the partial states and their
// merge once.
struct SplitCostModel {
  int64_t cta_fixed_tiles = 2;
  int64_t split_merge_tiles = 2;
  int64_t max_splits = 64;
  int64_t min_tiles_per_split = 2;

  int64_t cost(int64_t problems, int64_t tiles, int64_t slots, int64_t splits) const {
    const int64_t waves = (problems * splits + slots - 1) / slots;
    const int64_t tiles_per_cta = (tiles + splits - 1) / splits;
    return waves * (tiles_per_cta + cta_fixed_tiles) + (splits > 1 ? split_merge_tiles : 0);
  }

  // The split count of least modelled time for `problems` problems of at most `tiles` KV tiles
  // each (the smaller count on ties: fewer partials to merge), at most max_splits and never
  // fewer than min_tiles_per_split tiles a split.
  int choose(int64_t problems, int64_t tiles, int64_t slots) const {
    if (problems <= 0 || slots <= 0 || tiles <= 0) return 1;
    const int64_t most = std::clamp<int64_t>(tiles / min_tiles_per_split, 1, max_splits);
    int64_t best = 1, best_cost = cost(problems, tiles, slots, 1);
    for (int64_t s = 2; s <= most; ++s) {
      const int64_t c = cost(problems, tiles, slots, s);
      if (c < best_cost) best = s, best_cost = c;
    }
    return static_cast<int>(best);
  }
};

}  // namespace hopattn::plan
