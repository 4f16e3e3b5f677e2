// Order of the fwd kernel's persistent tile walk (kernels/fwd/tile_scheduler.cuh): whether the
// m-blocks of a (batch, head) pair go out in heavy + light pairs. Pure C++ (no CUDA), tested on
// the CPU.
#pragma once

#include <cstdint>

namespace hopattn::plan {

// Whether a tile's work grows with its m-block: a diagonal (right bound, causal 0) and no left
// bound.
constexpr bool fwd_growing_diagonal(int64_t window_left, int64_t window_right) {
  return window_right >= 0 && window_left < 0;
}

// With a diagonal in the mask and no left bound (causal, or a window bounded on the right only:
// `diagonal`) a tile's work grows with its m-block: m-block m of n sees about (m + 1) / n of
// the keys. (A left bound makes every tile past the first few equal.) The LPT order then runs
// each L2 section's tiles from heavy to light, and the static round-robin over the grid meets a
// sawtooth: with 128 m-blocks a section and 132 CTAs (B = 1, hd256, 16k: one head a section), a
// replay of the walk (tools/fwd_walk_replay.py) puts the busiest CTA at 1.79x the mean (1.2x at
// hd128 16k, 1.1x at S = 1k, B = 16), which is what the causal rows lose against the non-causal
// ones. Paired, a CTA takes m-blocks n - 1 - k and k of one pair back to back, so every unit
// costs about the same and the busiest CTA carries at most one unit more than the others:
// ceil(units / grid) units against a mean of units / grid. Paired only where that costs at most
// 4% and n is even (an odd n leaves a unit of one light tile a pair, which the replay found up to
// 1.22x worse than unpaired); over 1407 causal shapes (hd 64 / 128 / 256, S 512..32k) the
// busiest CTA's geometric mean over the mean goes from 1.12 to 1.07, none more than 4% worse.
// Dense calls only (`equal_lengths`): with varlen sequences of unequal lengths (which the host
// does not see) a pair's two tiles no longer add up to the same work, and over 200 random
// mixes of 2-32 sequences of 64..8192 tokens the replay put pairing at 1.225 against 1.193.
constexpr bool fwd_pair_tiles(bool diagonal, bool equal_lengths, int64_t m_blocks, int64_t pairs,
                              int grid) {
  if (!diagonal || !equal_lengths || grid <= 0 || m_blocks <= 0 || m_blocks % 2 != 0 ||
      pairs <= 0) {
    return false;
  }
  const int64_t units = m_blocks / 2 * pairs;
  const int64_t rounds = (units + grid - 1) / grid;
  return units >= grid && rounds * grid * 25 <= units * 26;
}

// K/V bytes of the (batch, head) pairs one L2 section of the walk holds (kernels/fwd/
// tile_scheduler.cuh runs a section's tiles side by side), on a card of `l2_bytes` of L2. Under
// a growing diagonal the LPT order inside a section balances the CTAs, so sections stay large
// (half the L2; the pairing rules above and plan/fwd_walk_replay.hpp were measured there).
// With equal tiles the order only decides how many K/V a round of the grid streams at once:
// H100, non-causal, sections of 1.5 MB (mostly one KV head: its m-blocks next to each other)
// against half the L2: hd128 1k B=16 0.90x the time, 4k B=4 0.97x, 16k 1.00x; hd256 4k 0.98x;
// hd64 4k 0.99x (at half the L2 a round spans 12-48 heads and reads each K/V ~3.5 times from
// HBM at hd128 4k: ncu, docs/perf/NOTES.md run set w).
constexpr int64_t fwd_section_bytes(int64_t l2_bytes, bool growing) {
  return growing ? l2_bytes / 2 : l2_bytes / 32;
}

// m-blocks the walk covers: n, rounded up to even when paired (the extra one has no rows; the
// rule above pairs even counts only, the walk takes any).
constexpr int fwd_walk_m_blocks(int m_blocks, bool paired) {
  return paired ? m_blocks + (m_blocks & 1) : m_blocks;
}

}  // namespace hopattn::plan
