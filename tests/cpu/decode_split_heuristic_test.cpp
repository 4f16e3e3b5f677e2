// The decode split heuristic (src/plan/decode_splits.hpp): whole waves, the issue's shapes (H200:
// 132 SMs x 2 CTAs = 264 slots; 8 KV heads), and its bounds.
#include <gtest/gtest.h>

#include "plan/decode_splits.hpp"

namespace hopattn::plan {
namespace {

using kernels::decode::kMaxAutoSplits;
using kernels::decode::kMinTilesPerSplit;
using kernels::decode::kTileTokens;

constexpr int64_t kSlots = 264;

int64_t waves(int64_t ctas, int64_t slots) { return (ctas + slots - 1) / slots; }

TEST(DecodeSplitHeuristic, IssueShapes) {
  // B = 1 (8 problems): kv 8k -> 32 splits of 4 tiles (256 CTAs, one wave); kv 1k -> 8 splits
  // of 2 tiles (the floor of kMinTilesPerSplit).
  EXPECT_EQ(choose_decode_splits(8, 8192, kSlots), 32);
  EXPECT_EQ(choose_decode_splits(8, 1024, kSlots), 8);
  // B = 8 (64 problems): 4 splits = 256 CTAs in one wave, not 5 = 320 CTAs in 1.2 waves.
  EXPECT_EQ(choose_decode_splits(64, 8192, kSlots), 4);
  EXPECT_EQ(choose_decode_splits(64, 32768, kSlots), 4);
  // B = 32 (256 problems) already fills a wave: no split (2 splits = 512 CTAs, two waves of half
  // the keys each, plus the merge).
  EXPECT_EQ(choose_decode_splits(256, 8192, kSlots), 1);
  EXPECT_EQ(choose_decode_splits(256, 1024, kSlots), 1);
  EXPECT_EQ(choose_decode_splits(1024, 32768, kSlots), 1);
}

TEST(DecodeSplitHeuristic, Bounds) {
  EXPECT_EQ(choose_decode_splits(264, 1 << 20, kSlots), 1);  // a full wave already
  EXPECT_EQ(choose_decode_splits(8, 512, kSlots), 4);        // 8 tiles, 2 a split at least
  // 4 tiles: the merge costs what a split saves.
  EXPECT_EQ(choose_decode_splits(8, 256, kSlots), 1);
  EXPECT_EQ(choose_decode_splits(8, 64, kSlots), 1);  // one tile
  EXPECT_EQ(choose_decode_splits(1, 1 << 20, kSlots), kMaxAutoSplits);
  EXPECT_EQ(choose_decode_splits(0, 8192, kSlots), 1);
  EXPECT_EQ(choose_decode_splits(8, 0, kSlots), 1);
  EXPECT_EQ(choose_decode_splits(8, 8192, 0), 1);
}

// Over a grid of shapes: within the bounds, never a partial last wave that a smaller split count
// would avoid at no more tiles per CTA, and never worse (in the model) than no split or than the
// old rule ceil(slots / problems).
TEST(DecodeSplitHeuristic, GridProperties) {
  for (int64_t slots : {114, 132, 228, 264, 396}) {
    for (int64_t problems = 1; problems <= 1100; problems += (problems < 80 ? 1 : 13)) {
      for (int64_t kv : {1, 64, 65, 200, 1024, 3000, 8192, 32768, 131072}) {
        SCOPED_TRACE(::testing::Message()
                     << "slots " << slots << " problems " << problems << " kv " << kv);
        const int s = choose_decode_splits(problems, kv, slots);
        const int64_t tiles = (kv + kTileTokens - 1) / kTileTokens;
        ASSERT_GE(s, 1);
        ASSERT_LE(s, kMaxAutoSplits);
        if (s > 1) ASSERT_GE(tiles / s, kMinTilesPerSplit);
        const int64_t cost = kDecodeSplitCost.cost(problems, tiles, slots, s);
        EXPECT_LE(cost, kDecodeSplitCost.cost(problems, tiles, slots, 1));
        const int64_t old = std::clamp<int64_t>(
            std::min<int64_t>(problems >= slots ? 1 : (slots + problems - 1) / problems,
                              std::max<int64_t>(1, tiles / kMinTilesPerSplit)),
            1, kMaxAutoSplits);
        EXPECT_LE(cost, kDecodeSplitCost.cost(problems, tiles, slots, old));
        // Same waves with fewer splits would only add merge work: the choice is the least.
        for (int64_t fewer = 1; fewer < s; ++fewer) {
          EXPECT_FALSE(waves(problems * fewer, slots) == waves(problems * s, slots) &&
                       (tiles + fewer - 1) / fewer == (tiles + s - 1) / s);
        }
      }
    }
  }
}

}  // namespace
}  // namespace hopattn::plan
