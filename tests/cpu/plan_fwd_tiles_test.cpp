// The fwd's choice between the base KV tile and the wide instance (plan/fwd_tiles.hpp and the
// floors of kernels/fwd/configs.hpp's kFwdWideConfigs).
#include <gtest/gtest.h>

#include "kernels/fwd/configs.hpp"
#include "plan/fwd_tiles.hpp"

namespace hopattn::plan {
namespace {

using kernels::fwd::fwd_wide_config_index;
using kernels::fwd::kFwdWideConfigs;

TEST(PlanFwdTiles, KeysPerTileFollowTheWindow) {
  EXPECT_EQ(fwd_keys_per_tile(16384, -1, -1, 128), 16384);  // full
  EXPECT_EQ(fwd_keys_per_tile(16384, -1, 0, 128), 16384);   // causal: the diagonal walks it all
  EXPECT_EQ(fwd_keys_per_tile(16384, 1024, 0, 128), 1152);  // causal window of 1024
  EXPECT_EQ(fwd_keys_per_tile(16384, 1024, 512, 128), 1664);
  EXPECT_EQ(fwd_keys_per_tile(16384, 1024, -1, 128), 16384);  // open to the right
  EXPECT_EQ(fwd_keys_per_tile(1000, 4096, 4096, 128), 1000);  // the sequence is shorter
  EXPECT_EQ(fwd_keys_per_tile(0, -1, -1, 128), 0);
}

TEST(PlanFwdTiles, WideFromEachRowsFloor) {
  for (const auto& row : kFwdWideConfigs) {
    EXPECT_TRUE(fwd_wide_tiles(row.min_keys, row.min_keys, false, true, false));
    EXPECT_FALSE(fwd_wide_tiles(row.min_keys - 1, row.min_keys, false, false, false));
    // Wider than the base row (more keys or more query rows a tile).
    EXPECT_TRUE(row.block_n > 128 || row.consumers > 2);
    EXPECT_EQ(row.block_n % 16, 0);
    EXPECT_TRUE(row.consumers == 2 || row.consumers == 3);
  }
  // The rows the measurements chose (configs.hpp): hd64 at 192 query rows from any length,
  // hd128 at 176 keys (O in Q) from 16k; hd256 and (192, 128) have none.
  ASSERT_GE(fwd_wide_config_index(64, 64), 0);
  EXPECT_EQ(kFwdWideConfigs[fwd_wide_config_index(64, 64)].consumers, 3);
  EXPECT_EQ(kFwdWideConfigs[fwd_wide_config_index(64, 64)].min_keys, 0);
  ASSERT_GE(fwd_wide_config_index(128, 128), 0);
  EXPECT_TRUE(kFwdWideConfigs[fwd_wide_config_index(128, 128)].o_in_q);
  EXPECT_EQ(fwd_wide_config_index(256, 256), -1);
  EXPECT_EQ(fwd_wide_config_index(192, 128), -1);
}

// 192-row tiles under a growing diagonal only for dense calls (the host replays their walk);
// any other mask (non-causal, a window bounded on the left) takes them from the row's floor on.
TEST(PlanFwdTiles, MoreRowsUnderADiagonalWantADenseCall) {
  EXPECT_TRUE(fwd_wide_tiles(512, 0, true, false, false));    // no diagonal growth, varlen
  EXPECT_TRUE(fwd_wide_tiles(4096, 0, true, true, true));     // causal, dense
  EXPECT_FALSE(fwd_wide_tiles(16384, 0, true, true, false));  // causal, varlen
  EXPECT_TRUE(fwd_wide_tiles(16384, 0, false, true, false));  // wider keys: the walk is the base's
}

}  // namespace
}  // namespace hopattn::plan
