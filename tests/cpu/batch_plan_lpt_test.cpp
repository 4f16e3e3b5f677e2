// The planner's assignment rule (batch_schedule.cpp, assign; batch_plan.hpp, the assignment): the
// grid is cut into G = gcd(KV heads, CTAs) groups of consecutive CTAs, KV head h of every work
// goes to group h mod G, and each group runs plain longest-processing-time-first on its items:
// in decreasing cost, each onto the group's least-loaded CTA, the lowest-numbered of equally
// loaded ones. Checked against a plain O(items x CTAs) simulation of that rule: equal-cost items
// are interchangeable, so each CTA's sorted list of item costs must come out the same, and every
// item must sit in its KV head's group. The steps include runs of thousands of equal items (the
// run path), steps of distinct costs (the tree), and costs that fall sharply, on grids of 132,
// 264 and odd sizes, with head counts that make one group, one per KV head, and between.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "batch_plan_check.hpp"
#include "plan/batch_plan.hpp"

namespace hopattn::plan {
namespace {

using check::Buffer;
using check::describe;
using check::llama8b;
using check::Step;
using check::step_of;

// The least-loaded CTA of [first, last), the lowest-numbered of equally loaded ones.
int least_loaded(const std::vector<int64_t>& load, int first, int last) {
  int best = first;
  for (int k = first + 1; k < last; ++k) {
    if (load[static_cast<size_t>(k)] < load[static_cast<size_t>(best)]) best = k;
  }
  return best;
}

void expect_rule(const BatchPlanLimits& l, const Step& s) {
  BatchPlanner planner(l);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  planner.plan(s.cu.data(), s.kv.data(), s.batch(), buf.data(), buf.usable());
  const check::Plan p = check::read_plan(buf.data());
  const int ctas = l.num_ctas;
  const int groups = std::gcd(l.num_kv_heads, ctas);
  const int group_ctas = ctas / groups;
  // Each CTA's item costs, largest first, as the plan gives them; and each group's costs.
  std::vector<std::vector<int64_t>> got(static_cast<size_t>(ctas));
  std::vector<std::vector<int64_t>> group_costs(static_cast<size_t>(groups));
  for (int c = 0; c < ctas; ++c) {
    for (int32_t i = p.cta_offsets[static_cast<size_t>(c)];
         i < p.cta_offsets[static_cast<size_t>(c) + 1]; ++i) {
      const BatchWorkItem& it = p.items[static_cast<size_t>(i)];
      ASSERT_EQ(it.kv_head % groups, c / group_ctas) << "KV head " << it.kv_head << " on CTA " << c
                                                     << "; " << describe(l) << "; " << describe(s);
      got[static_cast<size_t>(c)].push_back(batch_item_cost(it));
      group_costs[static_cast<size_t>(c / group_ctas)].push_back(batch_item_cost(it));
    }
    std::sort(got[static_cast<size_t>(c)].begin(), got[static_cast<size_t>(c)].end(),
              std::greater<>());
  }
  // The rule, plainly, over the same multisets of costs.
  std::vector<std::vector<int64_t>> want(static_cast<size_t>(ctas));
  std::vector<int64_t> load(static_cast<size_t>(ctas), 0);
  for (int g = 0; g < groups; ++g) {
    std::vector<int64_t>& costs = group_costs[static_cast<size_t>(g)];
    std::sort(costs.begin(), costs.end(), std::greater<>());
    for (const int64_t cost : costs) {
      const int best = least_loaded(load, g * group_ctas, (g + 1) * group_ctas);
      load[static_cast<size_t>(best)] += cost;
      want[static_cast<size_t>(best)].push_back(cost);
    }
  }
  for (int c = 0; c < ctas; ++c) {
    ASSERT_EQ(got[static_cast<size_t>(c)], want[static_cast<size_t>(c)])
        << "CTA " << c << "; " << describe(l) << "; " << describe(s);
  }
}

TEST(BatchPlanLpt, MatchesThePlainRule) {
  // (KV heads, CTAs): groups of 33 CTAs with 2 or 1 KV heads each, one group (7 CTAs, and 3 KV
  // heads over 132), one CTA, and one group per KV head.
  const int shapes[][2] = {{8, 132}, {8, 264}, {8, 7}, {8, 1}, {3, 132}, {6, 132}, {12, 132}};
  for (const auto& shape : shapes) {
    BatchPlanLimits l = llama8b(shape[1]);
    l.num_kv_heads = shape[0];
    l.num_qo_heads = 4 * shape[0];
    // Equal requests: one run of B x KV heads items (pure decode, pure prefill).
    for (int b : {17, 128, 256}) {
      expect_rule(l, step_of(std::vector<int32_t>(b, 1), std::vector<int32_t>(b, 8193)));
    }
    expect_rule(l, step_of(std::vector<int32_t>(8, 2048), std::vector<int32_t>(8, 2048)));
    // Issue (a): prefill tiles (short runs) then a run of 124 x KV heads equal decodes.
    std::vector<int32_t> q = {2048, 2048, 2048, 2048}, kv = {2048, 2048, 6144, 10240};
    q.resize(128, 1);
    kv.resize(128, 4097);
    expect_rule(l, step_of(q, kv));
    // Decodes of distinct lengths (runs of one work: the tree alone), and a mix of runs of each
    // length.
    std::mt19937_64 rng(7);
    std::vector<int32_t> dq, dkv;
    for (int i = 0; i < 255; ++i) {
      dq.push_back(1);
      dkv.push_back(std::uniform_int_distribution<int>(2048, 16384)(rng));
    }
    expect_rule(l, step_of(dq, dkv));
    std::vector<int32_t> mq, mkv;
    for (int i = 0; i < 200; ++i) {
      mq.push_back(i % 3 == 0 ? 4 : 1);
      mkv.push_back(1024 * (1 + i % 5) + 4);
    }
    expect_rule(l, step_of(mq, mkv));
    // Costs that fall sharply: long prefill tiles, then short decodes of distinct lengths.
    std::vector<int32_t> sq = {4096, 4096}, skv = {16384, 12288};
    for (int i = 0; i < 200; ++i) {
      sq.push_back(1);
      skv.push_back(std::uniform_int_distribution<int>(16, 300)(rng));
    }
    expect_rule(l, step_of(sq, skv));
  }
}

}  // namespace
}  // namespace hopattn::plan
