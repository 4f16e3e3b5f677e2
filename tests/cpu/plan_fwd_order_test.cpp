// The fwd tile walk's pairing rule (plan/fwd_order.hpp): pairs only with a diagonal in the mask
// and at least two tiles a CTA, and the walk's m-block count rounded up to even then.
#include <gtest/gtest.h>

#include "plan/fwd_order.hpp"

namespace hopattn::plan {
namespace {

TEST(PlanFwdOrder, PairsDiagonalMasksWithTwoTilesACta) {
  EXPECT_TRUE(fwd_pair_tiles(true, 1024, 132));
  EXPECT_TRUE(fwd_pair_tiles(true, 264, 132));
  EXPECT_FALSE(fwd_pair_tiles(true, 263, 132));    // pairs would leave CTAs without work
  EXPECT_FALSE(fwd_pair_tiles(false, 1024, 132));  // equal tiles: nothing to even out
  EXPECT_FALSE(fwd_pair_tiles(true, 1024, 0));
  EXPECT_TRUE(fwd_pair_tiles(true, int64_t{1} << 31, 132));
}

TEST(PlanFwdOrder, WalkMBlocksEvenWhenPaired) {
  EXPECT_EQ(fwd_walk_m_blocks(127, true), 128);
  EXPECT_EQ(fwd_walk_m_blocks(128, true), 128);
  EXPECT_EQ(fwd_walk_m_blocks(1, true), 2);
  EXPECT_EQ(fwd_walk_m_blocks(127, false), 127);
}

}  // namespace
}  // namespace hopattn::plan
