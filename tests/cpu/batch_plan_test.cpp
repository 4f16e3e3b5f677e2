// The batch planner (src/plan/batch_plan.*) over seeded random serving steps (mixed prefill and
// decode, causal or not, windows, GQA ratios 1..128, head dims, page sizes, grids of 132 and 264
// CTAs), degenerate steps, and one planner reused across steps; every plan is read back from its
// bytes and checked by batch_plan_check.hpp. A failing case prints its seed and composition.
#include "plan/batch_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "batch_plan_check.hpp"

namespace hopattn::plan {
namespace {

using check::Buffer;
using check::describe;
using check::KeyRange;
using check::llama8b;
using check::plan_and_verify;
using check::read_plan;
using check::row_keys;
using check::rule_visible;
using check::Step;
using check::step_of;
using check::verify;

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  const size_t i = std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng);
  return *(values.begin() + i);
}

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Roughly log-uniform in [lo, hi]: as many short lengths as long ones.
int64_t log_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const double x =
      std::uniform_real_distribution<double>(std::log(double(lo)), std::log(double(hi) + 1))(rng);
  return std::clamp<int64_t>(static_cast<int64_t>(std::exp(x)), lo, hi);
}

BatchPlanLimits random_limits(std::mt19937_64& rng) {
  BatchPlanLimits l;
  const int group = pick(rng, {1, 5, 8, 8, 4, 16, 128});
  l.num_kv_heads = group == 128 ? 1 : pick(rng, {1, 2, 8});
  l.num_qo_heads = group * l.num_kv_heads;
  l.head_dim = pick(rng, {64, 128, 256});
  l.page_size = pick(rng, {1, 16, 64});
  l.causal = uniform(rng, 0, 3) != 0;
  const int w = static_cast<int>(uniform(rng, 0, 5));
  const int lefts[] = {-1, -1, 256, 1024, 37, 0};
  const int rights[] = {-1, -1, -1, 0, 5, 0};
  l.window = {lefts[w], rights[w]};
  l.num_ctas = pick(rng, {132, 264});
  l.max_batch = 256;
  l.max_tokens = pick(rng, {16384, 16384, 4096});
  return l;
}

// B 1..256; most requests decode 1..16 tokens, some prefill up to 2048; kv_len from q_len to
// 32k (some without cache); a few steps of identical requests (whole waves matter there).
Step random_step(std::mt19937_64& rng, const BatchPlanLimits& l) {
  const int batch = static_cast<int>(pick(rng, {1, 2, 3, 8}) == 8 ? uniform(rng, 1, l.max_batch)
                                                                  : uniform(rng, 1, 16));
  const double decode_share = pick(rng, {0.0, 0.5, 0.9, 1.0});
  const bool identical = uniform(rng, 0, 9) == 0;
  std::vector<int32_t> q(batch), kv(batch);
  int64_t tokens = 0;
  for (int b = 0; b < batch; ++b) {
    if (identical && b > 0) {
      q[b] = q[0], kv[b] = kv[0];
    } else {
      const bool decode = std::uniform_real_distribution<double>(0, 1)(rng) < decode_share;
      q[b] = static_cast<int32_t>(decode ? (uniform(rng, 0, 2) == 0 ? uniform(rng, 1, 16) : 1)
                                         : log_uniform(rng, 1, 2048));
      const int64_t cached = uniform(rng, 0, 4) == 0 ? 0 : log_uniform(rng, 1, 32768);
      kv[b] = static_cast<int32_t>(std::min<int64_t>(32768, q[b] + cached));
      kv[b] = std::max(kv[b], q[b]);
    }
    // Stay within max_tokens: the rest of the requests get whatever is left (possibly 0).
    q[b] = static_cast<int32_t>(std::min<int64_t>(q[b], l.max_tokens - tokens));
    tokens += q[b];
  }
  return step_of(q, kv);
}

// ------------------------------------------------------------------------ tests

TEST(BatchPlanVisibility, ClosedFormMatchesRule) {
  for (bool causal : {false, true}) {
    for (int left : {-1, 0, 3, 9}) {
      for (int right : {-1, 0, 2}) {
        BatchPlanLimits l;
        l.causal = causal;
        l.window = {left, right};
        for (int q = 1; q <= 6; ++q) {
          for (int kv = q; kv <= 14; ++kv) {
            for (int i = 0; i < q; ++i) {
              const KeyRange r = row_keys(l, i, q, kv);
              for (int j = -1; j <= kv; ++j) {
                ASSERT_EQ(rule_visible(l, i, j, q, kv), j >= r.lo && j < r.hi)
                    << "causal " << causal << " window (" << left << ", " << right << ") q " << q
                    << " kv " << kv << " i " << i << " j " << j;
              }
              // The planner relies on: never empty (kv >= q), both ends non-decreasing in i.
              ASSERT_LT(r.lo, r.hi);
              if (i > 0) {
                ASSERT_LE(row_keys(l, i - 1, q, kv).lo, r.lo);
                ASSERT_LE(row_keys(l, i - 1, q, kv).hi, r.hi);
              }
            }
          }
        }
      }
    }
  }
}

// Seeds base .. base + seeds - 1: random limits (with the overlap switches as given) and a random
// step each, planned and verified.
void check_seeded_steps(uint64_t base, int seeds, BatchOverlap spread_decodes,
                        BatchOverlap side_decodes = BatchOverlap::kOff,
                        BatchOverlap partition = BatchOverlap::kOff) {
  for (int seed = 0; seed < seeds; ++seed) {
    std::mt19937_64 rng(base + seed);
    BatchPlanLimits l = random_limits(rng);
    l.spread_decodes = spread_decodes;
    l.side_decodes = side_decodes;
    l.partition_decodes = partition;
    if (partition != BatchOverlap::kOff) {
      l.decode_cta_rate_milli = static_cast<int>(uniform(rng, 1000, 4000));
    }
    // The prefill sections (BatchPlanLimits::l2_bytes): none, the card's, and 1 MB (a section a
    // request or two). Drawn from the seed, so the steps stay those of earlier builds.
    const int64_t l2_choices[3] = {0, kBatchL2Bytes, int64_t{1} << 20};
    l.l2_bytes = l2_choices[seed % 3];
    const Step s = random_step(rng, l);
    BatchPlanner planner(l);
    Buffer buf(BatchPlanner::workspace_bytes(l));
    const std::string err = plan_and_verify(planner, s, buf);
    ASSERT_TRUE(err.empty()) << "seed " << seed << ": " << err << "\n  " << describe(l) << "\n  "
                             << describe(s);
  }
}

TEST(BatchPlanRandom, InvariantsOverSeededSteps) {
  check_seeded_steps(0xba7c4, 2000, BatchOverlap::kOff);
  // The defaults (each order where the planner picks it).
  check_seeded_steps(0xba7c5, 400, BatchOverlap::kAuto, BatchOverlap::kAuto, BatchOverlap::kAuto);
  // partition_decodes: coverage as ever, each CTA one kind, LPT's bound within each part.
  check_seeded_steps(0x9a47, 400, BatchOverlap::kAuto, BatchOverlap::kAuto, BatchOverlap::kOn);
}

// The issue's steps: (a) 4 chunks of 2048 (cached 0, 0, 4096, 8192) + 124 decodes at 4096;
// (b) one chunk of 8192 + 255 decodes at 2k..16k; (c) 128 decodes at 8192.
Step issue_step(char which) {
  std::vector<int32_t> q, kv;
  if (which == 'a') {
    q = {2048, 2048, 2048, 2048}, kv = {2048, 2048, 6144, 10240};
    q.resize(128, 1), kv.resize(128, 4097);
  } else if (which == 'b') {
    q = {8192}, kv = {8192};
    for (int i = 0; i < 255; ++i) {
      q.push_back(1);
      kv.push_back(2048 + (14336 * i) / 254);
    }
  } else {
    q.assign(128, 1), kv.assign(128, 8192);
  }
  return step_of(q, kv);
}

// A pure decode step is never partitioned, whatever the planner's switch.
void expect_pure_step_unpartitioned(BatchPlanner& planner, Buffer& buf) {
  BatchPlanInfo info;
  ASSERT_EQ(plan_and_verify(planner, issue_step('c'), buf, &info), "");
  EXPECT_EQ(info.partition_ctas, 0);
  EXPECT_FALSE(info.decodes_spread);
}

// partition_decodes on the issue's (b): the split follows the modelled rates (a CTA streaming
// decodes alone r times its share: the faster, the fewer decode CTAs).
TEST(BatchPlanPartition, SplitFollowsTheDecodeRate) {
  const Step b = issue_step('b');
  int previous = 0;
  for (int rate : {1000, 1500, 2000, 3000}) {
    BatchPlanLimits l = llama8b(132);
    l.partition_decodes = BatchOverlap::kOn;
    l.decode_cta_rate_milli = rate;
    BatchPlanner planner(l);
    Buffer buf(BatchPlanner::workspace_bytes(l));
    BatchPlanInfo info;
    ASSERT_EQ(plan_and_verify(planner, b, buf, &info), "") << "rate " << rate;
    EXPECT_GT(info.partition_ctas, 0);
    EXPECT_LT(info.partition_ctas, 33);  // 8 KV heads on 132 CTAs: groups of 33
    EXPECT_GE(info.partition_ctas, previous) << "rate " << rate;
    EXPECT_FALSE(info.decodes_spread);
    previous = info.partition_ctas;
    if (rate == 1000) expect_pure_step_unpartitioned(planner, buf);
  }
}

// partition_ctas fixes the split (clamped to the group's CTAs - 1), whatever the rate models; the
// plan still covers the step exactly once.
TEST(BatchPlanPartition, FixedSplit) {
  const Step b = issue_step('b');
  for (int fixed : {1, 16, 32, 40}) {
    BatchPlanLimits l = llama8b(132);
    l.partition_ctas = fixed;
    BatchPlanner planner(l);
    Buffer buf(BatchPlanner::workspace_bytes(l));
    BatchPlanInfo info;
    ASSERT_EQ(plan_and_verify(planner, b, buf, &info), "") << "fixed " << fixed;
    EXPECT_EQ(info.partition_ctas, std::min(fixed, 32)) << "fixed " << fixed;
  }
}

// The default order per step: every mixed step is partitioned ((b), whose decodes cost more than
// its prefill, and (a), whose prefill costs more), with no spread order and no side items; a
// pure step gets neither. Asking for the side lane (or the spread order) keeps (a) whole.
TEST(BatchPlanPartition, AutoPartitionsMixedSteps) {
  BatchPlanLimits l = llama8b(132);
  BatchPlanner planner(l);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  BatchPlanInfo info;
  for (char step : {'a', 'b'}) {
    ASSERT_EQ(plan_and_verify(planner, issue_step(step), buf, &info), "") << step;
    EXPECT_GT(info.partition_ctas, 0) << step;
    EXPECT_LT(info.partition_ctas, 33) << step;  // 8 KV heads on 132 CTAs: groups of 33
    EXPECT_FALSE(info.decodes_spread) << step;
    EXPECT_EQ(info.num_side_items, 0) << step;
  }
  expect_pure_step_unpartitioned(planner, buf);
  l.side_decodes = BatchOverlap::kOn;
  BatchPlanner side(l);
  ASSERT_EQ(plan_and_verify(side, issue_step('a'), buf, &info), "");
  EXPECT_EQ(info.partition_ctas, 0);
  EXPECT_GT(info.num_side_items, 0);
}

// One planner made for the limits serves every smaller step with the same buffer, and what it
// writes does not depend on the steps before (byte-identical to a fresh planner's plan).
TEST(BatchPlanReuse, SmallerStepsWithOneBuffer) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 6; ++round) {
    const BatchPlanLimits l = random_limits(rng);
    BatchPlanner planner(l);
    Buffer buf(BatchPlanner::workspace_bytes(l)), fresh_buf(BatchPlanner::workspace_bytes(l));
    // The largest step first: max_batch requests sharing max_tokens, then smaller ones.
    std::vector<int32_t> q(l.max_batch, l.max_tokens / l.max_batch), kv(l.max_batch, 32768);
    q[0] += l.max_tokens % l.max_batch;
    const Step full = step_of(q, kv);
    std::string err = plan_and_verify(planner, full, buf);
    ASSERT_TRUE(err.empty()) << "full step: " << err << "\n  " << describe(l);
    for (int i = 0; i < 40; ++i) {
      const Step s = random_step(rng, l);
      BatchPlanInfo info;
      err = plan_and_verify(planner, s, buf, &info);
      ASSERT_TRUE(err.empty()) << "round " << round << " step " << i << ": " << err << "\n  "
                               << describe(l) << "\n  " << describe(s);
      BatchPlanner fresh(l);
      fresh_buf.refill();
      fresh.plan(s.cu.data(), s.kv.data(), s.batch(), fresh_buf.data(), fresh_buf.usable());
      ASSERT_EQ(std::memcmp(buf.data(), fresh_buf.data(), info.used_bytes), 0)
          << "round " << round << " step " << i << ": a reused planner's plan differs\n  "
          << describe(l) << "\n  " << describe(s);
    }
  }
}

TEST(BatchPlanEdges, EmptyAndDegenerateSteps) {
  BatchPlanLimits l = llama8b();
  BatchPlanner planner(l);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  const std::vector<Step> steps = {
      step_of({}, {}),                        // B = 0
      step_of({0, 0, 3}, {0, 100, 3}),        // empty requests, no cache
      step_of({1}, {1}),                      // one token, one key
      step_of({2048}, {2048}),                // one causal prefill
      step_of({1}, {1 << 30}),                // one enormous decode: splits capped
      step_of({16, 17, 15}, {16, 4000, 64}),  // rows 64 (decode) and 68 (prefill)
  };
  for (const Step& s : steps) {
    BatchPlanInfo info;
    const std::string err = plan_and_verify(planner, s, buf, &info);
    ASSERT_TRUE(err.empty()) << err << "\n  " << describe(s);
    EXPECT_LE(info.num_splits_max, kMaxSplits);
  }
  // B = 0: every CTA's list is empty.
  buf.refill();
  const int32_t zero = 0;
  const BatchPlanInfo info = planner.plan(&zero, nullptr, 0, buf.data(), buf.usable());
  EXPECT_EQ(info.num_items, 0);
  EXPECT_EQ(read_plan(buf.data()).cta_offsets, std::vector<int32_t>(l.num_ctas + 1, 0));
}

TEST(BatchPlanEdges, QLensFormMatchesOffsets) {
  BatchPlanLimits l = llama8b(132);
  BatchPlanner planner(l);
  Buffer a(BatchPlanner::workspace_bytes(l)), b(BatchPlanner::workspace_bytes(l));
  const std::vector<int32_t> q = {1, 0, 700, 5, 16}, kv = {9000, 0, 700, 40, 300};
  const Step s = step_of(q, kv);
  const BatchPlanInfo info = planner.plan(s.cu.data(), s.kv.data(), 5, a.data(), a.usable());
  planner.plan_q_lens(q.data(), kv.data(), 5, b.data(), b.usable());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), info.used_bytes), 0);
  EXPECT_EQ(verify(l, s, info, a.data()), "");
}

// The issue's steps on Llama-3.1-8B attention (32 q heads, 8 KV heads) and an H200's grid of
// 264 CTAs: what gets split, into how many pieces, and how even the busiest CTA comes out (plain
// LPT over both kinds: no partition).
TEST(BatchPlanShapes, IssueSteps) {
  BatchPlanLimits l = llama8b(264);
  l.partition_decodes = BatchOverlap::kOff;
  BatchPlanner planner(l);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  auto plan = [&](const Step& s) {
    BatchPlanInfo info;
    const std::string err = plan_and_verify(planner, s, buf, &info);
    EXPECT_EQ(err, "") << describe(s);
    return info;
  };
  // Pure decode at 8k keys: below 32 requests every unit is split so that 256 pieces fill one
  // wave (the decode family's split heuristic picks the same 32, 16, 8, 4, 2 splits); from 32
  // requests on, the units fill the grid alone.
  for (int b : {1, 2, 4, 8, 16, 32, 64, 128}) {
    const BatchPlanInfo info =
        plan(step_of(std::vector<int32_t>(b, 1), std::vector<int32_t>(b, 8193)));
    const int units = 8 * b;
    EXPECT_EQ(info.num_items, std::max(256, units)) << "B = " << b;
    EXPECT_EQ(info.num_merges, units < 256 ? units : 0) << "B = " << b;
    EXPECT_EQ(info.num_splits_max, std::max(1, 256 / units)) << "B = " << b;
  }
  // (d) pure prefill, 8 x 2048 new tokens: 64 tiles of 32 positions x 4 heads each, per KV head;
  // (a) 4 prefill chunks of 2048 (cached 0, 0, 4096, 8192) + 124 decodes at 4096 cached: no split
  // (the units outnumber the CTAs), and LPT lands within 1% of the mean.
  const BatchPlanInfo d =
      plan(step_of(std::vector<int32_t>(8, 2048), std::vector<int32_t>(8, 2048)));
  EXPECT_EQ(d.num_items, 8 * 64 * 8);
  EXPECT_EQ(d.num_merges, 0);
  std::vector<int32_t> q = {2048, 2048, 2048, 2048}, kv = {2048, 2048, 6144, 10240};
  q.resize(128, 1);
  kv.resize(128, 4097);
  const BatchPlanInfo a = plan(step_of(q, kv));
  const BatchPlanHeader& h = read_plan(buf.data()).header;
  EXPECT_EQ(h.num_prefill_items, 4 * 64 * 8);
  EXPECT_EQ(h.num_decode_items, 124 * 8);
  EXPECT_EQ(a.num_merges, 0);
  EXPECT_LE(double(a.max_cta_cost) * l.num_ctas, 1.01 * double(a.total_cost));
}

// BatchPlanLimits::spread_decodes: the same invariants over seeded steps (each CTA largest first
// within each kind), and on step (a) decodes between prefill items: with plain LPT every CTA runs
// its decodes after its prefill items, spread the first decode of a CTA starts on average well
// before the decodes' share of the load from the end, and CTAs stream decodes at staggered times.
TEST(BatchPlanSpread, InvariantsAndIssueStep) {
  check_seeded_steps(0x59ead, 400, BatchOverlap::kOn);
  std::vector<int32_t> q = {2048, 2048, 2048, 2048}, kv = {2048, 2048, 6144, 10240};
  q.resize(128, 1);
  kv.resize(128, 4097);
  const Step a = step_of(q, kv);
  // Per CTA: the load before its first decode, over its whole load.
  auto first_decode_at = [&](bool spread) {
    BatchPlanLimits l = llama8b(132);
    l.spread_decodes = spread ? BatchOverlap::kOn : BatchOverlap::kOff;
    l.partition_decodes = BatchOverlap::kOff;
    BatchPlanner planner(l);
    Buffer buf(BatchPlanner::workspace_bytes(l));
    EXPECT_EQ(plan_and_verify(planner, a, buf), "");
    const check::Plan p = read_plan(buf.data());
    std::vector<double> at;
    for (int c = 0; c < p.header.num_ctas; ++c) {
      int64_t before = 0, total = 0, first = -1;
      for (int i = p.cta_offsets[c]; i < p.cta_offsets[c + 1]; ++i) {
        if (p.items[i].kind != uint16_t(BatchTileKind::kPrefill) && first < 0) first = before;
        before += batch_item_cost(p.items[i]);
      }
      total = before;
      if (first >= 0 && total > 0) at.push_back(double(first) / double(total));
    }
    return at;
  };
  const std::vector<double> plain = first_decode_at(false), spread = first_decode_at(true);
  ASSERT_FALSE(plain.empty());
  ASSERT_EQ(plain.size(), spread.size());  // the same items on the same CTAs
  const double plain_min = *std::min_element(plain.begin(), plain.end());
  double spread_mean = 0, spread_max = 0;
  for (double f : spread) {
    spread_mean += f / double(spread.size());
    spread_max = std::max(spread_max, f);
  }
  EXPECT_GT(plain_min, 0.4);  // plain LPT: after the prefill items (the decodes are ~36% of (a))
  EXPECT_LT(spread_mean, 0.25) << "max " << spread_max;
  EXPECT_LT(spread_max, 0.5) << "mean " << spread_mean;
}

// BatchPlanLimits::side_decodes: the invariants over seeded steps (check_plan also holds each
// CTA's side lane within its prefill load), with the spread order too; on step (a) every decode
// part runs on the side lanes and the lists are LPT's item for item; a pure
// decode step and limits without a side-lane kernel (head dim 256, pages of 1) plan none.
TEST(BatchPlanSide, InvariantsAndIssueStep) {
  check_seeded_steps(0x51de, 400, BatchOverlap::kOff, BatchOverlap::kOn);
  check_seeded_steps(0x51df, 100, BatchOverlap::kOn, BatchOverlap::kOn);
  std::vector<int32_t> q = {2048, 2048, 2048, 2048}, kv = {2048, 2048, 6144, 10240};
  q.resize(128, 1);
  kv.resize(128, 4097);
  const auto plan_of = [](BatchPlanLimits l, const Step& s) {
    BatchPlanner planner(l);
    Buffer buf(BatchPlanner::workspace_bytes(l));
    EXPECT_EQ(plan_and_verify(planner, s, buf), "");
    return read_plan(buf.data());
  };
  const auto side_items = [](const check::Plan& p) {
    int n = 0;
    for (const BatchWorkItem& it : p.items) {
      n += it.kind == uint16_t(BatchTileKind::kDecodeSide) ? 1 : 0;
    }
    return n;
  };
  BatchPlanLimits l = llama8b(132);
  l.spread_decodes = l.side_decodes = l.partition_decodes = BatchOverlap::kOff;
  const check::Plan plain = plan_of(l, step_of(q, kv));
  l.side_decodes = BatchOverlap::kOn;
  const check::Plan side = plan_of(l, step_of(q, kv));
  ASSERT_EQ(plain.items.size(), side.items.size());
  int moved = 0, decodes = 0;
  for (size_t i = 0; i < side.items.size(); ++i) {
    BatchWorkItem a = plain.items[i], b = side.items[i];
    decodes += a.kind == uint16_t(BatchTileKind::kDecode) ? 1 : 0;
    moved += b.kind == uint16_t(BatchTileKind::kDecodeSide) ? 1 : 0;
    b.kind = a.kind;  // otherwise the same item in the same place
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "item " << i;
  }
  EXPECT_EQ(decodes, 124 * 8);
  // Each CTA hides decodes of up to 1 / kSideLaneCost of its prefill load (at 6, about a quarter of
  // its ~7.5 decodes), the rest stay on the consumers.
  EXPECT_GT(moved, 0);
  EXPECT_LT(moved, decodes);
  // Pure decodes: no CTA has prefill to hide them under.
  EXPECT_EQ(side_items(
                plan_of(l, step_of(std::vector<int32_t>(128, 1), std::vector<int32_t>(128, 8192)))),
            0);
  BatchPlanLimits big = l;
  big.head_dim = 256;
  EXPECT_EQ(side_items(plan_of(big, step_of(q, kv))), 0);
  BatchPlanLimits pages_of_one = l;
  pages_of_one.page_size = 1;
  EXPECT_EQ(side_items(plan_of(pages_of_one, step_of(q, kv))), 0);
  // A cheaper side lane (BatchPlanLimits::side_lane_cost) takes more of each CTA's decodes.
  BatchPlanLimits cheap = l;
  cheap.side_lane_cost = 2;
  const int cheap_moved = side_items(plan_of(cheap, step_of(q, kv)));
  EXPECT_GT(cheap_moved, moved);
  EXPECT_LE(cheap_moved, decodes);
}

// BatchOverlap::kAuto for the spread order and the side lane, where no partition is made
// (partition_decodes kOff): step (a) (decodes ~36% of the cost) gets both, step (b) (decodes
// ~70%: the step streams HBM anyway) neither, nor do pure steps; kOff keeps a mixed step plain.
TEST(BatchPlanOverlap, AutoPicksMixedStepsWhoseDecodesFitUnderThePrefill) {
  const auto info_of = [](const BatchPlanLimits& l, const Step& s) {
    BatchPlanner planner(l);
    Buffer buf(BatchPlanner::workspace_bytes(l));
    BatchPlanInfo info;
    EXPECT_EQ(plan_and_verify(planner, s, buf, &info), "");
    return info;
  };
  std::vector<int32_t> aq = {2048, 2048, 2048, 2048}, akv = {2048, 2048, 6144, 10240};
  aq.resize(128, 1);
  akv.resize(128, 4097);
  std::vector<int32_t> bq = {8192}, bkv = {8192};
  for (int i = 0; i < 255; ++i) {
    bq.push_back(1);
    bkv.push_back(2048 + i * 14336 / 254);
  }
  BatchPlanLimits l = llama8b(132);
  l.partition_decodes = BatchOverlap::kOff;
  const BatchPlanInfo a = info_of(l, step_of(aq, akv));
  EXPECT_TRUE(a.decodes_spread);
  EXPECT_GT(a.num_side_items, 0);
  const BatchPlanInfo b = info_of(l, step_of(bq, bkv));
  EXPECT_FALSE(b.decodes_spread);
  EXPECT_EQ(b.num_side_items, 0);
  const BatchPlanInfo decodes =
      info_of(l, step_of(std::vector<int32_t>(128, 1), std::vector<int32_t>(128, 8192)));
  EXPECT_FALSE(decodes.decodes_spread);
  EXPECT_EQ(decodes.num_side_items, 0);
  BatchPlanLimits off = l;
  off.spread_decodes = off.side_decodes = BatchOverlap::kOff;
  const BatchPlanInfo a_off = info_of(off, step_of(aq, akv));
  EXPECT_FALSE(a_off.decodes_spread);
  EXPECT_EQ(a_off.num_side_items, 0);
}

// Tile shapes at the GQA extremes: 128 q heads on one KV head make a single decode token 128
// rows (a prefill tile of one position); with MHA up to 64 tokens are one decode tile (16, 32 or
// 64 rows), beyond that prefill tiles.
TEST(BatchPlanShapes, GroupExtremes) {
  BatchPlanLimits l = llama8b(132);
  l.num_qo_heads = 128;
  l.num_kv_heads = 1;
  BatchPlanner wide(l);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  ASSERT_EQ(plan_and_verify(wide, step_of({1, 2}, {5000, 40}), buf), "");
  for (const BatchWorkItem& it : read_plan(buf.data()).items) {
    EXPECT_EQ(it.kind, uint16_t(BatchTileKind::kPrefill));
    EXPECT_EQ(it.row_end - it.row_begin, 128);
  }
  l.num_qo_heads = l.num_kv_heads = 8;
  BatchPlanner mha(l);
  Buffer mha_buf(BatchPlanner::workspace_bytes(l));
  ASSERT_EQ(plan_and_verify(mha, step_of({1, 16, 17, 64, 65}, {300, 300, 300, 300, 300}), mha_buf),
            "");
  for (const BatchWorkItem& it : read_plan(mha_buf.data()).items) {
    const int rows = it.q_len <= 16 ? 16 : it.q_len <= 32 ? 32 : it.q_len <= 64 ? 64 : 128;
    EXPECT_EQ(it.tile_rows, rows) << "q_len " << it.q_len;
  }
}

}  // namespace
}  // namespace hopattn::plan
