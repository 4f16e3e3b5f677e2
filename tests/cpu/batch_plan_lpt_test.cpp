// The planner's assignment rule (batch_schedule.cpp, assign_levels): items in decreasing cost;
// a run of kAssignRunItemsMin or more equal-cost items goes by plain longest-processing-time-first
// over the grid (each onto the least-loaded CTA, the lowest-numbered of equally loaded ones); every
// other item into the CTA group (the first ceil(P / 2) CTAs, the rest) of the lesser mean load
// (the first on a tie), and there onto the least-loaded CTA by the same tie rule. Checked against
// a plain O(items x CTAs) simulation of that rule: equal-cost items are interchangeable, so each
// CTA's sorted list of item costs must come out the same. The steps include runs of thousands of
// equal items (the run path) and steps without long runs (the trees), on grids of 132, 264 and
// odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
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

// Each CTA's item costs, largest first, as the plan at `base` gives them.
std::vector<std::vector<int64_t>> plan_costs(const unsigned char* base, int ctas) {
  const check::Plan p = check::read_plan(base);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(ctas));
  for (int c = 0; c < ctas; ++c) {
    for (int32_t i = p.cta_offsets[static_cast<size_t>(c)];
         i < p.cta_offsets[static_cast<size_t>(c) + 1]; ++i) {
      out[static_cast<size_t>(c)].push_back(batch_item_cost(p.items[static_cast<size_t>(i)]));
    }
    std::sort(out[static_cast<size_t>(c)].begin(), out[static_cast<size_t>(c)].end(),
              std::greater<>());
  }
  return out;
}

// The least-loaded CTA of [first, last), the lowest-numbered of equally loaded ones.
int least_loaded(const std::vector<int64_t>& load, int first, int last) {
  int best = first;
  for (int k = first + 1; k < last; ++k) {
    if (load[static_cast<size_t>(k)] < load[static_cast<size_t>(best)]) best = k;
  }
  return best;
}

// The rule, plainly, over the same multiset of costs.
std::vector<std::vector<int64_t>> simulate_rule(std::vector<int64_t> costs, int ctas) {
  std::sort(costs.begin(), costs.end(), std::greater<>());
  std::vector<int64_t> load(static_cast<size_t>(ctas), 0);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(ctas));
  const int split = (ctas + 1) / 2;  // group 0: CTAs [0, split), group 1: [split, ctas)
  const int64_t size0 = split, size1 = ctas - split;
  int64_t total0 = 0, total1 = 0;
  for (size_t i = 0; i < costs.size();) {
    size_t j = i;
    while (j < costs.size() && costs[j] == costs[i]) ++j;
    const bool whole_grid = static_cast<int64_t>(j - i) >= kAssignRunItemsMin;
    for (; i < j; ++i) {
      const int64_t c = costs[i];
      int best;
      if (whole_grid) {
        best = least_loaded(load, 0, ctas);
      } else if (static_cast<unsigned __int128>(total1) * static_cast<unsigned __int128>(size0) <
                 static_cast<unsigned __int128>(total0) * static_cast<unsigned __int128>(size1)) {
        best = least_loaded(load, split, ctas);
      } else {
        best = least_loaded(load, 0, split);
      }
      (best >= split ? total1 : total0) += c;
      load[static_cast<size_t>(best)] += c;
      out[static_cast<size_t>(best)].push_back(c);
    }
  }
  return out;
}

void expect_rule(const BatchPlanLimits& l, const Step& s) {
  BatchPlanner planner(l);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  planner.plan(s.cu.data(), s.kv.data(), s.batch(), buf.data(), buf.usable());
  const std::vector<std::vector<int64_t>> got = plan_costs(buf.data(), l.num_ctas);
  std::vector<int64_t> all;
  for (const auto& c : got) all.insert(all.end(), c.begin(), c.end());
  const std::vector<std::vector<int64_t>> want = simulate_rule(all, l.num_ctas);
  for (int c = 0; c < l.num_ctas; ++c) {
    ASSERT_EQ(got[static_cast<size_t>(c)], want[static_cast<size_t>(c)])
        << "CTA " << c << "; " << describe(l) << "; " << describe(s);
  }
}

TEST(BatchPlanLpt, MatchesThePlainRule) {
  for (int ctas : {132, 264, 7, 1}) {
    const BatchPlanLimits l = llama8b(ctas);
    // Equal requests: one run of B x 8 items (pure decode, pure prefill).
    for (int b : {17, 128, 256}) {
      expect_rule(l, step_of(std::vector<int32_t>(b, 1), std::vector<int32_t>(b, 8193)));
    }
    expect_rule(l, step_of(std::vector<int32_t>(8, 2048), std::vector<int32_t>(8, 2048)));
    // Issue (a): prefill tiles (short runs) then a run of 124 x 8 equal decodes.
    std::vector<int32_t> q = {2048, 2048, 2048, 2048}, kv = {2048, 2048, 6144, 10240};
    q.resize(128, 1);
    kv.resize(128, 4097);
    expect_rule(l, step_of(q, kv));
    // Decodes of distinct lengths (runs of 8: the tree alone), and a mix of runs of each length.
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
  }
}

}  // namespace
}  // namespace hopattn::plan
