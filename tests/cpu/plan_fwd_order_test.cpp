// The fwd tile walk's pairing rule (plan/fwd_order.hpp): pairs only with a diagonal in the mask
// and at least two tiles a CTA, and the walk's m-block count rounded up to even then.
#include <gtest/gtest.h>

#include "plan/fwd_order.hpp"

namespace hopattn::plan {
namespace {

TEST(PlanFwdOrder, PairsDiagonalMasksWhoseUnitsFillTheRounds) {
  // B = 1, 8 heads, 128 m-blocks (hd256 16k): 512 units, 4 rounds of 132 hold 528 (3.1% idle).
  EXPECT_TRUE(fwd_pair_tiles(true, true, 128, 8, 132));
  EXPECT_FALSE(fwd_pair_tiles(false, true, 128, 8, 132));  // equal tiles: nothing to even out
  EXPECT_FALSE(fwd_pair_tiles(true, false, 128, 8, 132));  // varlen: lengths the host lacks
  EXPECT_TRUE(fwd_pair_tiles(true, true, 8, 256, 132));    // S = 1k, B = 16, 16 heads: 1024 units
  EXPECT_TRUE(fwd_pair_tiles(true, true, 4, 264, 132));    // 528 units: 4 full rounds
  EXPECT_FALSE(fwd_pair_tiles(true, true, 4, 272, 132));   // 544 units: a fifth round 12 / 132 full
  EXPECT_FALSE(fwd_pair_tiles(true, true, 3, 528, 132));   // odd: a light unit a pair
  EXPECT_FALSE(fwd_pair_tiles(true, true, 2, 131, 132));   // fewer units than CTAs
  EXPECT_TRUE(fwd_pair_tiles(true, true, 2, 132, 132));
  EXPECT_FALSE(fwd_pair_tiles(true, true, 128, 8, 0));
  EXPECT_TRUE(fwd_pair_tiles(true, true, int64_t{1} << 20, 4096, 132));  // no overflow
}

TEST(PlanFwdOrder, GrowingDiagonalHasNoLeftBound) {
  EXPECT_TRUE(fwd_growing_diagonal(-1, 0));     // causal
  EXPECT_TRUE(fwd_growing_diagonal(-1, 20));    // a window bounded on the right only
  EXPECT_FALSE(fwd_growing_diagonal(-1, -1));   // full
  EXPECT_FALSE(fwd_growing_diagonal(1024, 0));  // a causal window: equal tiles past the first
}

TEST(PlanFwdOrder, SectionsSmallWhereTilesAreEqual) {
  constexpr int64_t kL2 = 50 << 20;
  EXPECT_EQ(fwd_section_bytes(kL2, true), 25 << 20);   // LPT balance under a growing diagonal
  EXPECT_EQ(fwd_section_bytes(kL2, false), kL2 / 32);  // equal tiles: L2 locality only
  EXPECT_EQ(fwd_section_bytes(0, false), 0);  // the launch still takes one KV head a section
}

TEST(PlanFwdOrder, WalkMBlocksEvenWhenPaired) {
  EXPECT_EQ(fwd_walk_m_blocks(127, true), 128);
  EXPECT_EQ(fwd_walk_m_blocks(128, true), 128);
  EXPECT_EQ(fwd_walk_m_blocks(1, true), 2);
  EXPECT_EQ(fwd_walk_m_blocks(127, false), 127);
}

}  // namespace
}  // namespace hopattn::plan
