// Host checks of the fwd kernel's tile order (no GPU needed; compiled by nvcc because the
// scheduler header is device code). The multiply-high division itself: fast_divisor_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/fwd/tile_scheduler.cuh"
#include "kernels/fwd/traits.cuh"
#include "plan/fwd_order.hpp"

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
// ones, so every tile goes to exactly one CTA; and where the LPT order is one descending run
// (B = 1, 8 heads, 128 m-blocks in one L2 section, 132 CTAs) it evens out the work per CTA that
// plain striding gave mostly to the low CTAs. With one head a section the order is a sawtooth
// and the snake no longer evens it out: the paired walk below.
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
          state = LptTileScheduler::next_state(state, cta, grid, false);
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
        state = snake ? LptTileScheduler::next_state(state, cta, grid, false) : state + 2 * grid;
      }
    }
    const auto [lo, hi] = std::minmax_element(work.begin(), work.end());
    return double(*hi) / double(*lo);
  };
  EXPECT_GT(spread(false), 1.2);
  EXPECT_LT(spread(true), 1.1);
}

SchedulerParams params(int m_blocks, int heads, int batch, int section, bool paired) {
  SchedulerParams p;
  p.paired = paired;
  p.num_m_blocks = plan::fwd_walk_m_blocks(m_blocks, paired);
  p.num_heads = heads;
  p.batch = batch;
  p.section_bh = section;
  p.total_tiles = p.num_m_blocks * heads * batch;
  p.set_divisors();
  return p;
}

// Every tile (m-block, head, batch) of the walk, in CTA order: each CTA's states from
// first_state through next_state while valid, as the kernel's producer and consumers walk them.
std::vector<std::vector<WorkTile>> walk(const SchedulerParams& p, int grid) {
  std::vector<std::vector<WorkTile>> tiles(grid);
  for (int cta = 0; cta < grid; ++cta) {
    for (int s = LptTileScheduler::first_state(cta, p.paired); (s >> 1) < p.total_tiles;
         s = LptTileScheduler::next_state(s, cta, grid, p.paired)) {
      tiles[cta].push_back(LptTileScheduler::tile_at(p, s >> 1));
    }
  }
  return tiles;
}

// Paired: every real tile exactly once (the m-block past an odd count is the only extra one),
// and each CTA takes m-blocks n - 1 - k and k of one (batch, head) back to back.
TEST(FwdTileOrder, PairedWalkCoversEveryTileOnceInHeavyLightPairs) {
  for (int m_blocks : {2, 3, 7, 22, 86, 128}) {  // 22, 86: 192-row tiles at 4k, 16k
    for (int heads : {1, 5}) {
      for (int batch : {1, 3}) {
        for (int section : {1, 2, heads * batch}) {
          if (section > heads * batch) continue;
          const SchedulerParams p = params(m_blocks, heads, batch, section, true);
          for (int grid : {1, 7, 132}) {
            std::vector<int> seen(m_blocks * heads * batch, 0);
            int extra = 0;
            const auto tiles = walk(p, grid);
            for (const auto& list : tiles) {
              ASSERT_EQ(list.size() % 2, 0u);
              for (size_t i = 0; i < list.size(); i += 2) {
                const WorkTile& a = list[i];
                const WorkTile& b = list[i + 1];
                ASSERT_EQ(a.batch, b.batch);
                ASSERT_EQ(a.head, b.head);
                ASSERT_EQ(a.m_block + b.m_block, p.num_m_blocks - 1);
                ASSERT_GT(a.m_block, b.m_block);  // the heavy one first
                for (const WorkTile& w : {a, b}) {
                  if (w.m_block == m_blocks) {
                    ++extra;
                    continue;
                  }
                  ASSERT_LT(w.m_block, m_blocks);
                  ++seen[(w.batch * heads + w.head) * m_blocks + w.m_block];
                }
              }
            }
            for (int n : seen) ASSERT_EQ(n, 1);
            EXPECT_EQ(extra, m_blocks % 2 ? heads * batch : 0);
          }
        }
      }
    }
  }
}

// The case that made the pairs: B = 1, 8 heads, 16k causal at head dim 256 (128 m-blocks,
// 80-key blocks; K and V of a head, 16 MB, fill an L2 section alone), 132 CTAs. A tile's work is
// its KV blocks plus one for its fixed cost. The plain walk leaves the busiest CTA far above the
// mean (the causal rows ran at 0.58x the non-causal ones' rate there); paired, within a unit.
TEST(FwdTileOrder, PairedWalkBalancesLongCausalRows) {
  const int grid = 132, m_blocks = 128;
  auto busiest_over_mean = [&](bool paired, int heads, int section, int block_n) {
    const SchedulerParams p = params(m_blocks, heads, 1, section, paired);
    std::vector<double> work;
    for (const auto& list : walk(p, grid)) {
      double w = 0;
      for (const WorkTile& t : list) {
        if (t.m_block < m_blocks) w += (128 * (t.m_block + 1) + block_n - 1) / block_n + 1;
      }
      work.push_back(w);
    }
    double sum = 0, top = 0;
    for (double w : work) sum += w, top = std::max(top, w);
    return top / (sum / grid);
  };
  EXPECT_GT(busiest_over_mean(false, 8, 1, 80), 1.5);
  EXPECT_LT(busiest_over_mean(true, 8, 1, 80), 1.06);
  EXPECT_GT(busiest_over_mean(false, 16, 3, 128), 1.15);  // hd128 16k: 3 heads a section
  EXPECT_LT(busiest_over_mean(true, 16, 3, 128), 1.06);
}

}  // namespace
}  // namespace hopattn::kernels::fwd
