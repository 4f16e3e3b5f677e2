// Host checks of the fwd kernel's tile order (no GPU needed; compiled by nvcc because the
// scheduler header is device code). The multiply-high division itself: fast_divisor_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/fwd/tile_scheduler.cuh"
#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::fwd {
namespace {

// The persistent schedule with multiply-high divisions visits the same tiles, in the same order,
// as plain integer division of the tile index (the order described in tile_scheduler.cuh).
TEST(FwdTileOrder, MatchesPlainDivision) {
  for (int m_blocks : {1, 3, 128}) {
    for (int heads : {1, 5, 32}) {
      for (int batch : {1, 2, 17}) {
        for (int section : {1, 4, 7, 64, heads * batch}) {
          if (section > heads * batch) continue;
          SchedulerParams p;
          p.num_m_blocks = m_blocks;
          p.num_heads = heads;
          p.batch = batch;
          p.section_bh = section;
          p.total_tiles = m_blocks * heads * batch;
          p.set_divisors();
          for (int linear = 0; linear < p.total_tiles; ++linear) {
            const int per_section = m_blocks * section;
            const int first_bh = linear / per_section * section;
            const int rem = linear % per_section;
            const int here = std::min(section, heads * batch - first_bh);
            const int bh = first_bh + rem % here;
            const WorkTile w = LptTileScheduler::tile_at(p, linear);
            ASSERT_EQ(w.m_block, m_blocks - 1 - rem / here) << linear;
            ASSERT_EQ(w.batch, bh / heads) << linear;
            ASSERT_EQ(w.head, bh % heads) << linear;
          }
        }
      }
    }
  }
}

// The snake walk: CTA c takes index r grid + c in even rounds and r grid + grid - 1 - c in odd
// ones, so every tile goes to exactly one CTA; and on the causal case it was made for (B = 1, 8
// heads, 128 m-blocks, LPT order, 132 CTAs) it evens out the work per CTA that plain striding
// gave mostly to the low CTAs.
TEST(FwdTileOrder, SnakeWalkCoversEveryTileOnceAndBalancesCausalWork) {
  for (int grid : {1, 2, 7, 132}) {
    for (int total : {0, 1, grid - 1, grid, 5 * grid + 3, 1024}) {
      std::vector<int> owner(std::max(total, 0), -1);
      for (int cta = 0; cta < grid; ++cta) {
        for (int state = 2 * cta, round = 0; (state >> 1) < total; ++round) {
          const int linear = state >> 1;
          ASSERT_EQ(linear, round * grid + (round % 2 ? grid - 1 - cta : cta));
          ASSERT_EQ(owner[linear], -1) << "tile " << linear << " taken twice";
          owner[linear] = cta;
          state = LptTileScheduler::next_state(state, cta, grid);
        }
      }
      for (int linear = 0; linear < total; ++linear) ASSERT_GE(owner[linear], 0) << linear;
    }
  }
  // Work of tile i of the LPT order for B = 1, 8 heads, 128 causal m-blocks: 128 - i / 8 KV
  // blocks. Plain striding: CTA 0 gets the longest of each round.
  const int grid = 132, total = 1024;
  auto spread = [&](bool snake) {
    std::vector<long> work(grid, 0);
    for (int cta = 0; cta < grid; ++cta) {
      for (int state = 2 * cta; (state >> 1) < total;) {
        work[cta] += 128 - (state >> 1) / 8;
        state = snake ? LptTileScheduler::next_state(state, cta, grid) : state + 2 * grid;
      }
    }
    const auto [lo, hi] = std::minmax_element(work.begin(), work.end());
    return double(*hi) / double(*lo);
  };
  EXPECT_GT(spread(false), 1.2);
  EXPECT_LT(spread(true), 1.1);
}

}  // namespace
}  // namespace hopattn::kernels::fwd
