// The bwd launch order's host planner (src/plan/bwd_order.hpp): sections of equal size within the
// L2 budget, chosen only where the mask or the mode makes them pay, and never with the
// group-after-group order. How the kernel walks a section: bwd_order_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>

#include "plan/bwd_order.hpp"

namespace hopattn::plan {
namespace {

TEST(PlanBwdOrder, SectionsAreEqualAndFitTheBudget) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  EXPECT_EQ(bwd_section_groups(8 * kMiB, 16), 4);   // 5 fit: 4 x 4
  EXPECT_EQ(bwd_section_groups(16 * kMiB, 16), 2);  // 2 fit
  EXPECT_EQ(bwd_section_groups(64 * kMiB, 16), 1);  // none fits: one group at a time
  EXPECT_EQ(bwd_section_groups(kMiB, 16), 16);
  EXPECT_EQ(bwd_section_groups(0, 7), 7);
  EXPECT_EQ(bwd_section_groups(kMiB, 1), 1);
  for (int groups = 1; groups < 70; ++groups) {
    for (int64_t bytes : {int64_t{1}, 3 * kMiB, 7 * kMiB, 13 * kMiB, 41 * kMiB}) {
      const int s = bwd_section_groups(bytes, groups);
      const int count = (groups + s - 1) / s;
      ASSERT_TRUE(s >= 1 && s <= groups) << groups << " " << bytes;
      ASSERT_TRUE(s == 1 || s * bytes <= 40 * kMiB) << groups << " " << bytes;
      ASSERT_GE(groups - (count - 1) * s, s - count) << groups << " " << bytes;  // last: no runt
    }
  }
}

// Llama-3-8B training step: 32 / 8 heads, hd 128, B = 2 x 4096. A group's q side is 4 q heads x
// 4096 rows x (Q + dO in 16 bits, dq_accum in fp32) = 16 MiB: 2 of the 16 groups fit the budget.
TEST(PlanBwdOrder, SectionsOnlyWhereTheyPay) {
  BwdOrderShape s;
  s.q_heads = 32;
  s.kv_heads = 8;
  s.batch = 2;
  s.max_seqlen_q = 4096;
  s.head_dim_qk = s.head_dim_v = 128;
  AttentionOptions plain, causal, deterministic, both;
  causal.causal = true;
  deterministic.deterministic = true;
  both.causal = both.deterministic = true;
  EXPECT_EQ(bwd_launch_section(s, causal, BwdOrder::kSections), 2);
  EXPECT_EQ(bwd_launch_section(s, deterministic, BwdOrder::kSections), 2);
  EXPECT_EQ(bwd_launch_section(s, plain, BwdOrder::kSections), 1);  // group after group is faster
  EXPECT_EQ(bwd_launch_section(s, both, BwdOrder::kSections), 1);   // likewise
  for (const AttentionOptions& o : {plain, causal, deterministic, both}) {
    EXPECT_EQ(bwd_launch_section(s, o, BwdOrder::kHeads), 1);
  }
  s.max_seqlen_q = 512;  // 2 MiB a group: all 16 in one section
  EXPECT_EQ(bwd_launch_section(s, causal, BwdOrder::kSections), 16);
  s.kv_heads = 0;  // nothing to order
  EXPECT_EQ(bwd_launch_section(s, causal, BwdOrder::kSections), 1);
}

}  // namespace
}  // namespace hopattn::plan
