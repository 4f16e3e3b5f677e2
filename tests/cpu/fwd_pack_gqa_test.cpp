// The fwd kernel's choice of GQA packing (src/kernels/fwd/pack_gqa.hpp, plain C++): the tile
// counts behind the rule, the shapes it is meant for, and the override.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "kernels/fwd/pack_gqa.hpp"

namespace hopattn::kernels::fwd {
namespace {

constexpr int kBlockM = 128;

// Tiles per KV head: unpacked, group heads of ceil(Sq / 128) tiles; packed, ceil(Sq / floor(128 /
// group)) tiles of floor(128 / group) positions x group heads.
int64_t tiles(int group, int64_t sq, bool packed) {
  if (!packed) return (sq + kBlockM - 1) / kBlockM * group;
  const int64_t positions = kBlockM / group;
  return (sq + positions - 1) / positions;
}

TEST(FwdPackGqa, ShortQueriesPack) {
  // Chunked prefill and speculative verification: q_len 1..64 with Llama-style groups.
  for (int group : {2, 4, 5, 6, 7, 8, 16}) {
    for (int64_t sq : {1, 2, 7, 16, 17}) {
      EXPECT_TRUE(should_pack_gqa(group, sq, kBlockM)) << "group " << group << " sq " << sq;
    }
  }
  EXPECT_TRUE(should_pack_gqa(4, 64, kBlockM));    // 2 tiles instead of 4
  EXPECT_TRUE(should_pack_gqa(8, 16, kBlockM));    // 1 tile instead of 8
  EXPECT_TRUE(should_pack_gqa(128, 1, kBlockM));   // one position of 128 heads
  EXPECT_TRUE(should_pack_gqa(64, 200, kBlockM));  // 100 tiles instead of 128
}

TEST(FwdPackGqa, LongOrFullQueriesDoNotPack) {
  for (int group : {2, 4, 8}) {
    for (int64_t sq : {128, 256, 4096, 8192}) {  // whole tiles already
      EXPECT_FALSE(should_pack_gqa(group, sq, kBlockM)) << "group " << group << " sq " << sq;
    }
  }
  EXPECT_FALSE(should_pack_gqa(5, 239, kBlockM));   // 10 tiles either way
  EXPECT_FALSE(should_pack_gqa(8, 1000, kBlockM));  // 63 vs 64: under a tenth
  EXPECT_FALSE(should_pack_gqa(1, 1, kBlockM));     // no group
  EXPECT_FALSE(should_pack_gqa(8, 0, kBlockM));     // no rows
  EXPECT_FALSE(should_pack_gqa(129, 1, kBlockM));   // a position would not fit a tile
}

// The rule is exactly "packing saves at least a tenth of the tiles", and never adds tiles.
TEST(FwdPackGqa, RuleMatchesTileCounts) {
  for (int group = 2; group <= kBlockM; ++group) {
    for (int64_t sq = 1; sq <= 1100; sq += (sq < 140 ? 1 : 37)) {
      const int64_t unpacked = tiles(group, sq, false), packed = tiles(group, sq, true);
      const bool fits = kBlockM % group == 0;
      if (fits) {
        EXPECT_LE(packed, unpacked) << "group " << group << " sq " << sq;
      }
      EXPECT_EQ(should_pack_gqa(group, sq, kBlockM), packed * 10 <= unpacked * 9)
          << "group " << group << " sq " << sq;
    }
  }
}

TEST(FwdPackGqa, OverrideWinsWhereItCan) {
  EXPECT_TRUE(should_pack_gqa(8, 4096, kBlockM, true));
  EXPECT_FALSE(should_pack_gqa(8, 1, kBlockM, false));
  EXPECT_TRUE(should_pack_gqa(5, 239, kBlockM, true));
  // A group of 1 has nothing to pack; more than 128 heads do not fit one position in a tile.
  EXPECT_FALSE(should_pack_gqa(1, 1, kBlockM, true));
  EXPECT_FALSE(should_pack_gqa(200, 1, kBlockM, true));
}

TEST(FwdPackGqa, OutputBoxOnlyForWholePositions) {
  for (int pack : {1, 2, 4, 8, 16, 32, 64}) EXPECT_TRUE(packed_o_by_tma(pack)) << pack;
  for (int pack : {3, 5, 6, 7, 12, 96, 128}) EXPECT_FALSE(packed_o_by_tma(pack)) << pack;
}

}  // namespace
}  // namespace hopattn::kernels::fwd
