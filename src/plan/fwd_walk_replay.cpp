#include "plan/fwd_walk_replay.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "plan/fwd_order.hpp"

namespace hopattn::plan {
namespace {

// KV blocks of m-block m plus one for the tile's fixed cost; 0 for an m-block past the queries
// (the paired walk's rounding up to even m-blocks adds one without rows).
int64_t tile_work(const FwdWalkShape& s, int64_t m) {
  if (m * s.rows >= s.seqlen_q) return 0;
  const int64_t last_row = std::min((m + 1) * s.rows, s.seqlen_q) - 1;
  const int64_t keys =
      std::clamp(s.seqlen_k - s.seqlen_q + last_row + 1 + s.window_right, int64_t{0}, s.seqlen_k);
  return (keys + s.block_n - 1) / s.block_n + 1;
}

bool same_shape(const FwdWalkShape& a, const FwdWalkShape& b) {
  return a.rows == b.rows && a.seqlen_q == b.seqlen_q && a.seqlen_k == b.seqlen_k &&
         a.window_right == b.window_right && a.block_n == b.block_n && a.pairs == b.pairs &&
         a.section == b.section && a.grid == b.grid;
}

}  // namespace

double fwd_walk_busiest_over_mean(const FwdWalkShape& s, bool paired) {
  if (s.rows <= 0) return 1.0;
  const int64_t m_blocks = (s.seqlen_q + s.rows - 1) / s.rows;  // of one (batch, head) pair
  const int64_t walk_m = fwd_walk_m_blocks(static_cast<int>(m_blocks), paired);
  const int64_t ranks = paired ? walk_m / 2 : walk_m;
  const int64_t units = ranks * s.pairs;
  if (units <= 0 || s.grid <= 0 || s.section <= 0) return 1.0;
  const int64_t g = std::min<int64_t>(s.grid, units);
  // The order: sections of `section` pairs (the last may be short), inside each rank by rank and
  // the section's pairs side by side; unit i goes to position i % g of round i / g, snaking. A
  // run of equal units fills a contiguous range of CTAs a round: added as a difference array,
  // the replay costs a step a run, not a unit.
  // One buffer a thread, grown once: a call's host path allocates nothing after its first.
  thread_local std::vector<int64_t> diff;
  diff.assign(static_cast<size_t>(g) + 1, 0);
  int64_t pos = 0, total = 0;
  bool odd_round = false;
  for (int64_t first = 0; first < s.pairs; first += s.section) {
    const int64_t width = std::min(s.section, s.pairs - first);
    for (int64_t k = 0; k < ranks; ++k) {
      // A unit's work depends on its rank only (equal lengths): rank k's tile is m-block
      // walk_m - 1 - k, paired with m-block k.
      const int64_t w = tile_work(s, walk_m - 1 - k) + (paired ? tile_work(s, k) : 0);
      total += w * width;
      for (int64_t left = width; left > 0;) {
        const int64_t n = std::min(left, g - pos);
        const int64_t lo = odd_round ? g - pos - n : pos;  // CTAs lo .. lo + n - 1
        diff[lo] += w;
        diff[lo + n] -= w;
        left -= n;
        pos += n;
        if (pos == g) {
          pos = 0;
          odd_round = !odd_round;
        }
      }
    }
  }
  int64_t busiest = 0, load = 0;
  for (int64_t c = 0; c < g; ++c) busiest = std::max(busiest, load += diff[c]);
  if (total == 0) return 1.0;
  return static_cast<double>(busiest) * static_cast<double>(g) / static_cast<double>(total);
}

bool fwd_pair_by_replay(const FwdWalkShape& shape) {
  struct Entry {
    FwdWalkShape shape;
    bool paired;
  };
  thread_local std::array<Entry, 8> seen{};
  thread_local size_t count = 0;
  const size_t held = std::min(count, seen.size());
  for (size_t i = 0; i < held; ++i) {
    if (same_shape(seen[i].shape, shape)) return seen[i].paired;
  }
  const bool paired =
      fwd_walk_busiest_over_mean(shape, true) < fwd_walk_busiest_over_mean(shape, false);
  seen[count % seen.size()] = Entry{shape, paired};
  ++count;
  return paired;
}

}  // namespace hopattn::plan
