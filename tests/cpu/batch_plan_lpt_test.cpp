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

// `section_of(item)`: the rank of the item's section (BatchPlanLimits::l2_bytes), which orders
// the group's items before their cost; 0 for every item without sections.
template <class SectionOf>
void expect_rule(const BatchPlanLimits& l, const Step& s, SectionOf&& section_of) {
  BatchPlanner planner(l);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  planner.plan(s.cu.data(), s.kv.data(), s.batch(), buf.data(), buf.usable());
  const check::Plan p = check::read_plan(buf.data());
  const int ctas = l.num_ctas;
  const int groups = std::gcd(l.num_kv_heads, ctas);
  const int group_ctas = ctas / groups;
  // Each CTA's item costs, largest first, as the plan gives them; and each group's (section rank,
  // cost) pairs.
  std::vector<std::vector<int64_t>> got(static_cast<size_t>(ctas));
  std::vector<std::vector<std::pair<int, int64_t>>> group_costs(static_cast<size_t>(groups));
  for (int c = 0; c < ctas; ++c) {
    for (int32_t i = p.cta_offsets[static_cast<size_t>(c)];
         i < p.cta_offsets[static_cast<size_t>(c) + 1]; ++i) {
      const BatchWorkItem& it = p.items[static_cast<size_t>(i)];
      ASSERT_EQ(it.kv_head % groups, c / group_ctas) << "KV head " << it.kv_head << " on CTA " << c
                                                     << "; " << describe(l) << "; " << describe(s);
      got[static_cast<size_t>(c)].push_back(batch_item_cost(it));
      group_costs[static_cast<size_t>(c / group_ctas)].emplace_back(section_of(it),
                                                                    batch_item_cost(it));
    }
    std::sort(got[static_cast<size_t>(c)].begin(), got[static_cast<size_t>(c)].end(),
              std::greater<>());
  }
  // The rule, plainly, over the same multisets of costs: sections in rank order, each by
  // decreasing cost.
  std::vector<std::vector<int64_t>> want(static_cast<size_t>(ctas));
  std::vector<int64_t> load(static_cast<size_t>(ctas), 0);
  for (int g = 0; g < groups; ++g) {
    std::vector<std::pair<int, int64_t>>& costs = group_costs[static_cast<size_t>(g)];
    std::sort(costs.begin(), costs.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    for (const auto& [section, cost] : costs) {
      const int best = least_loaded(load, g * group_ctas, (g + 1) * group_ctas);
      load[static_cast<size_t>(best)] += cost;
      want[static_cast<size_t>(best)].push_back(cost);
    }
  }
  for (int c = 0; c < ctas; ++c) {
    std::sort(want[static_cast<size_t>(c)].begin(), want[static_cast<size_t>(c)].end(),
              std::greater<>());
    ASSERT_EQ(got[static_cast<size_t>(c)], want[static_cast<size_t>(c)])
        << "CTA " << c << "; " << describe(l) << "; " << describe(s);
  }
}

void expect_rule(const BatchPlanLimits& l, const Step& s) {
  expect_rule(l, s, [](const BatchWorkItem&) { return 0; });
}

// With the card's L2 named, a pure prefill step whose K/V exceeds half of it goes out section by
// section (16 x 1024 tokens: 64 MB, sections of six requests), the section of the costliest item
// first, LPT within each (check::prefill_section_ranks has the sections, plainly).
TEST(BatchPlanLpt, SectionsRunInTurn) {
  for (int ctas : {132, 33, 7}) {
    BatchPlanLimits l = llama8b(ctas);
    l.l2_bytes = kBatchL2Bytes;
    const std::vector<Step> steps = {
        step_of(std::vector<int32_t>(16, 1024), std::vector<int32_t>(16, 1024)),
        step_of(std::vector<int32_t>(8, 2048), std::vector<int32_t>(8, 2048)),
        step_of({512, 2048, 300, 4096, 1000, 129}, {8192, 2048, 9000, 4096, 20000, 129}),
        step_of(std::vector<int32_t>(3, 2048), std::vector<int32_t>(3, 2048)),  // one section
    };
    for (const Step& s : steps) {
      BatchPlanner planner(l);
      Buffer buf(BatchPlanner::workspace_bytes(l));
      const BatchPlanInfo info =
          planner.plan(s.cu.data(), s.kv.data(), s.batch(), buf.data(), buf.usable());
      const std::vector<int> rank =
          check::prefill_section_ranks(l, s, check::read_plan(buf.data()), info);
      if (ctas == 132 && s.batch() == 16) {
        EXPECT_EQ(*std::max_element(rank.begin(), rank.end()), 2) << "three sections";
      }
      expect_rule(l, s,
                  [&](const BatchWorkItem& it) { return rank[static_cast<size_t>(it.request)]; });
    }
  }
}

}  // namespace
}  // namespace hopattn::plan
