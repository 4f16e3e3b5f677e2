// The MLA host plan (src/plan/mla_plan.cpp) and the wave cost model it shares
// (src/plan/split_cost.hpp): row tiles, split counts, workspace layout, and that the size the
// API reports (132 SMs) bounds what a launch on any smaller part uses.
#include "plan/mla_plan.hpp"

#include <gtest/gtest.h>

#include "plan/mla_tiles.hpp"
#include "plan/split_cost.hpp"

namespace hopattn::plan::mla {
namespace {

Shape shape(int64_t batch, int64_t heads, int64_t q_len, int64_t kv, int splits = 0) {
  Shape s;
  s.batch = batch;
  s.heads = heads;
  s.total_q = batch * q_len;
  s.max_seqlen_q = q_len;
  s.max_kv_len = kv;
  s.num_splits = splits;
  return s;
}

TEST(MlaPlan, RowTilesPackTokensAndHeads) {
  EXPECT_EQ(make_plan(shape(4, 16, 1, 4096), 132).row_tiles, 1);
  EXPECT_EQ(make_plan(shape(4, 16, 4, 4096), 132).row_tiles, 1);  // 64 rows: one tile
  EXPECT_EQ(make_plan(shape(4, 16, 5, 4096), 132).row_tiles, 2);
  EXPECT_EQ(make_plan(shape(4, 128, 1, 4096), 132).row_tiles, 2);
  EXPECT_EQ(make_plan(shape(1, 16, 239, 4096), 132).row_tiles, (239 * 16 + 63) / 64);
  EXPECT_EQ(make_plan(shape(0, 16, 0, 0), 132).row_tiles, 1);
}

TEST(MlaPlan, SplitsFillTheGridOnlyWhenThatPays) {
  // A full grid: no split.
  EXPECT_EQ(make_plan(shape(128, 128, 1, 4096), 132).num_splits, 1);
  // One request of 2 tiles over 32k keys: many splits; never more than the keys allow.
  const Plan one = make_plan(shape(1, 128, 1, 32768), 132);
  EXPECT_GT(one.num_splits, 16);
  EXPECT_LE(one.num_splits, kMaxSplits);
  EXPECT_LE(one.num_splits, 32768 / kBlockKeys / 2);
  // Short caches are not split below two KV blocks a split.
  EXPECT_EQ(make_plan(shape(1, 16, 1, 100), 132).num_splits, 1);
  EXPECT_EQ(make_plan(shape(1, 16, 1, 0), 132).num_splits, 1);
}

TEST(MlaPlan, SeesawScheduleForComputeBoundTilesOverPagesOfWholeBlocks) {
  const auto with = [](Shape s, int64_t page, bool fp8) {
    s.page_size = page;
    s.fp8_cache = fp8;
    return s;
  };
  const Shape heads128 = with(shape(64, 128, 1, 4096), 64, false);
  EXPECT_TRUE(seesaw_schedule(heads128, 1));
  EXPECT_TRUE(seesaw_schedule(heads128, 4));   // 1024 keys a split
  EXPECT_FALSE(seesaw_schedule(heads128, 5));  // 820
  EXPECT_TRUE(make_plan(heads128, 132).seesaw);
  EXPECT_TRUE(seesaw_schedule(with(shape(64, 16, 8, 4096), 256, false), 1));       // 128 rows (MTP)
  EXPECT_TRUE(make_plan(with(shape(1, 128, 1024, 8192), 64, false), 132).seesaw);  // prefill
  EXPECT_FALSE(seesaw_schedule(with(shape(64, 16, 4, 4096), 64, false), 1));       // one tile
  EXPECT_FALSE(seesaw_schedule(with(shape(64, 16, 1, 4096), 64, false), 1));       // memory-bound
  EXPECT_FALSE(seesaw_schedule(with(shape(64, 128, 1, 4096), 16, false), 1));      // gathered
  EXPECT_FALSE(seesaw_schedule(with(shape(64, 128, 1, 4096), 32, false), 1));
  EXPECT_FALSE(seesaw_schedule(with(shape(64, 128, 1, 4096), 64, true), 1));  // fp8 widening
  EXPECT_FALSE(seesaw_schedule(with(shape(0, 128, 0, 0), 64, false), 1));
  EXPECT_FALSE(make_plan(with(shape(1, 128, 1, 32768), 64, false), 132).seesaw);  // 64 splits
  EXPECT_FALSE(make_plan(shape(64, 128, 1, 4096), 132).seesaw);                   // page size 0
}

// The two cases of tests/gpu/mla_kernel_test.cpp that reach the seesaw schedule through the
// plan's own rule (their block tables are as wide as their longest request).
TEST(MlaPlan, TheGpuGridReachesTheSeesawRule) {
  Shape a = shape(48, 128, 1, 1024);
  a.page_size = 64;
  Shape b = shape(24, 64, 2, 2048);
  b.page_size = 128;
  EXPECT_TRUE(make_plan(a, 132).seesaw);
  EXPECT_TRUE(make_plan(b, 132).seesaw);
  Shape forced = shape(1, 16, 1, 113);
  forced.page_size = 16;
  EXPECT_FALSE(make_plan(forced, 132).seesaw);
  forced.schedule = MlaSchedule::kSeesaw;
  EXPECT_TRUE(make_plan(forced, 132).seesaw);
  Shape one = a;
  one.schedule = MlaSchedule::kOneConsumer;
  EXPECT_FALSE(make_plan(one, 132).seesaw);
}

// Requests of <= 16 rows fit the narrow schedule (any cache, any page size); the plan takes it
// for fp8 caches unless forced otherwise; the seesaw rule never applies to them (>= 128 rows).
TEST(MlaPlan, NarrowScheduleForFp8RequestsOfAtMostSixteenRows) {
  EXPECT_TRUE(narrow_fits(shape(64, 16, 1, 4096)));
  EXPECT_TRUE(narrow_fits(shape(64, 8, 2, 4096)));
  EXPECT_TRUE(narrow_fits(shape(1, 5, 3, 4096)));  // 15 rows
  EXPECT_FALSE(narrow_fits(shape(64, 16, 2, 4096)));
  EXPECT_FALSE(narrow_fits(shape(64, 17, 1, 4096)));
  EXPECT_FALSE(narrow_fits(shape(64, 128, 1, 4096)));
  Shape s = shape(32, 16, 1, 8192);
  s.page_size = 64;
  EXPECT_FALSE(narrow_schedule(s));
  EXPECT_FALSE(make_plan(s, 132).narrow);
  s.schedule = MlaSchedule::kNarrow;
  EXPECT_TRUE(make_plan(s, 132).narrow);
  s.schedule = MlaSchedule::kAuto;
  s.fp8_cache = true;
  EXPECT_TRUE(narrow_schedule(s));
  EXPECT_TRUE(make_plan(s, 132).narrow);
  s.schedule = MlaSchedule::kOneConsumer;
  EXPECT_FALSE(make_plan(s, 132).narrow);
  Shape wide = shape(32, 128, 1, 8192);
  wide.page_size = 64;
  EXPECT_FALSE(make_plan(wide, 132).narrow);
  wide.schedule = MlaSchedule::kNarrow;  // forced (the validator refuses it over 16 rows)
  EXPECT_TRUE(make_plan(wide, 132).narrow);
}

// Over an fp8 cache the narrow schedule takes up to 32 rows (a 16-head shard with one MTP token,
// or 24 heads), with 32 columns past 16 rows; a 16-bit cache stays at 16.
TEST(MlaPlan, NarrowScheduleOverFp8TakesUpToThirtyTwoRows) {
  EXPECT_EQ(narrow_rows(false), 16);
  EXPECT_EQ(narrow_rows(true), 32);
  EXPECT_TRUE(narrow_fits(1, 16, true));
  EXPECT_TRUE(narrow_fits(1, 32, true));
  EXPECT_TRUE(narrow_fits(2, 16, true));  // 32 rows
  EXPECT_FALSE(narrow_fits(2, 16, false));
  EXPECT_FALSE(narrow_fits(3, 11, true));  // 33 rows
  Shape s = shape(32, 16, 2, 8192);
  s.page_size = 64;
  s.fp8_cache = true;
  EXPECT_TRUE(narrow_schedule(s));
  Plan p = make_plan(s, 132);
  EXPECT_TRUE(p.narrow);
  EXPECT_EQ(p.narrow_cols, 32);
  s.heads = 8;  // 16 rows
  p = make_plan(s, 132);
  EXPECT_TRUE(p.narrow);
  EXPECT_EQ(p.narrow_cols, 16);
  s.heads = 24;  // 48 rows: the 64-row tile
  EXPECT_FALSE(make_plan(s, 132).narrow);
  s = shape(32, 16, 2, 8192);
  s.page_size = 64;  // 16-bit cache, 32 rows
  EXPECT_FALSE(narrow_schedule(s));
  EXPECT_FALSE(make_plan(s, 132).narrow);
}

TEST(MlaPlan, ForcedSplitsAreClamped) {
  EXPECT_EQ(make_plan(shape(2, 16, 1, 4096, 7), 132).num_splits, 7);
  EXPECT_EQ(make_plan(shape(2, 16, 1, 4096, 100000), 132).num_splits, kMaxSplits);
}

TEST(MlaPlan, WorkspaceHoldsThePartialStates) {
  const Plan p = make_plan(shape(3, 24, 2, 8192, 5), 132);
  ASSERT_EQ(p.num_splits, 5);
  const size_t states = size_t(5) * 3 * 2 * 24;
  EXPECT_EQ(p.partial_o_offset, 0u);
  EXPECT_GE(p.partial_lse_offset, states * kLatentDim * sizeof(float));
  EXPECT_EQ(p.partial_lse_offset % 256, 0u);
  EXPECT_GE(p.workspace_bytes, p.partial_lse_offset + states * sizeof(float));
  EXPECT_EQ(make_plan(shape(128, 128, 1, 4096), 132).workspace_bytes, 0u);
}

TEST(MlaPlan, ReportedSizeBoundsEverySmallerPart) {
  for (int64_t batch : {1, 2, 5, 17, 64}) {
    for (int64_t kv : {64, 1000, 4097, 32768, 131072}) {
      for (int64_t heads : {16, 128}) {
        const Shape s = shape(batch, heads, 1, kv);
        const Plan reported = make_plan(s, kHopperMaxSms);
        for (int sms : {1, 16, 78, 114, 132}) {
          const Plan launch = make_plan(s, sms);
          EXPECT_LE(launch.num_splits, reported.num_splits) << batch << " " << kv << " " << sms;
          EXPECT_LE(launch.workspace_bytes, reported.workspace_bytes);
        }
      }
    }
  }
}

TEST(SplitCost, PicksTheLeastWaveCost) {
  const SplitCostModel m{2, 2, 64, 2};
  // 64 problems on 264 slots: 4 splits fill one wave exactly (5 would spill into a second).
  EXPECT_EQ(m.choose(64, 128, 264), 4);
  EXPECT_EQ(m.choose(264, 128, 264), 1);
  EXPECT_EQ(m.choose(0, 128, 264), 1);
  for (int64_t s = 1; s <= 64; ++s) {
    EXPECT_LE(m.cost(64, 128, 264, m.choose(64, 128, 264)), m.cost(64, 128, 264, s));
  }
}

}  // namespace
}  // namespace hopattn::plan::mla
