// The batch planner's concurrent form (BatchPlanLimits::concurrent_decodes): where a mixed step
// gets one, its decode runs and its prefill-only plan (checked by batch_plan_check.hpp: the runs
// hold exactly the decodes, the plan covers every prefill row once on its prefill CTAs alone),
// and where it must not get one.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "batch_plan_check.hpp"
#include "hopattn/error.hpp"
#include "plan/batch_plan.hpp"

namespace hopattn::plan {
namespace {

using check::Buffer;
using check::describe;
using check::llama8b;
using check::Plan;
using check::plan_and_verify;
using check::read_plan;
using check::Step;
using check::step_of;

BatchPlanInfo plan_checked(const BatchPlanLimits& l, const Step& s) {
  BatchPlanner planner(l);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  BatchPlanInfo info;
  const std::string err = plan_and_verify(planner, s, buf, &info);
  EXPECT_EQ(err, "") << describe(l) << "\n  " << describe(s);
  return info;
}

// `prefills` chunks of `chunk` new tokens (no cache), then `decodes` decodes of q_len 1 at kv.
Step mixed(int prefills, int chunk, int decodes, int kv, int decode_q_len = 1) {
  std::vector<int32_t> q(prefills, chunk), k(prefills, chunk);
  q.resize(prefills + decodes, decode_q_len);
  k.resize(prefills + decodes, kv);
  return step_of(q, k);
}

// The issue's step (a): 4 prefill chunks of 2048 (cached 0, 0, 4096, 8192) + 124 decodes at 4096.
Step issue_step_a() {
  std::vector<int32_t> q = {2048, 2048, 2048, 2048}, k = {2048, 2048, 6144, 10240};
  q.resize(128, 1), k.resize(128, 4097);
  return step_of(q, k);
}

// The issue's step (b): a chunk of 8192 + 255 decodes at 2k..16k.
Step issue_step_b() {
  std::vector<int32_t> q = {8192}, k = {8192};
  for (int i = 0; i < 255; ++i) q.push_back(1), k.push_back(2048 + (14336 * i) / 254);
  return step_of(q, k);
}

// The issue's (a) and (b) on 132 CTAs: the model's splits (26 and 21 prefill CTAs of each group
// of 33; run set am measured 25-26 and 20-22 best), one run of decodes.
TEST(BatchPlanConcurrent, IssueSteps) {
  const BatchPlanLimits l = llama8b(132);
  const BatchPlanInfo a = plan_checked(l, issue_step_a());
  EXPECT_EQ(a.concurrent.prefill_ctas, 26);
  ASSERT_EQ(a.concurrent.num_runs, 1);
  EXPECT_EQ(a.concurrent.runs[0].begin, 4);
  EXPECT_EQ(a.concurrent.runs[0].end, 128);
  EXPECT_EQ(a.concurrent.runs[0].q_len, 1);
  EXPECT_EQ(plan_checked(l, issue_step_b()).concurrent.prefill_ctas, 21);
  // Pure steps have none.
  EXPECT_EQ(plan_checked(l, mixed(0, 0, 128, 8192)).concurrent.prefill_ctas, 0);
  EXPECT_EQ(plan_checked(l, mixed(8, 2048, 0, 0)).concurrent.prefill_ctas, 0);
}

// On a card of more HBM bandwidth the decodes' cap is higher: (b) gets more decode CTAs (run set
// ar's H200: best at 15-17 prefill CTAs of 33; the scaled model's 16), (a), whose decodes the cap
// does not bind, keeps 26. set_hbm_gbps() on a made planner plans as a planner made with it.
TEST(BatchPlanConcurrent, ScalesWithTheCardsBandwidth) {
  BatchPlanLimits l = llama8b(132);
  l.hbm_gbps = kConcurrentModelHbmGbps;
  EXPECT_EQ(plan_checked(l, issue_step_b()).concurrent.prefill_ctas, 21);
  l.hbm_gbps = 4800;
  EXPECT_EQ(plan_checked(l, issue_step_a()).concurrent.prefill_ctas, 26);
  EXPECT_EQ(plan_checked(l, issue_step_b()).concurrent.prefill_ctas, 16);
  BatchPlanner planner(llama8b(132));
  planner.set_hbm_gbps(4800);
  Buffer buf(BatchPlanner::workspace_bytes(l));
  BatchPlanInfo info;
  EXPECT_EQ(plan_and_verify(planner, issue_step_b(), buf, &info), "");
  EXPECT_EQ(info.concurrent.prefill_ctas, 16);
  EXPECT_THROW(planner.set_hbm_gbps(-1), Error);
  l.hbm_gbps = -5;
  EXPECT_THROW(BatchPlanner{l}, Error);
}

// The tail (BatchPlanLimits::concurrent_tail_milli): on (a) the form's prefill works also go to
// the decodes' CTAs, which start loaded by the modelled decode time; the CTAs of the first launch
// carry less than without the tail, and every CTA ends within the largest work of the busiest.
TEST(BatchPlanConcurrent, TailOnTheDecodesCtas) {
  BatchPlanLimits l = llama8b(132);
  Buffer plain_buf(BatchPlanner::workspace_bytes(l));
  BatchPlanner plain(l);
  BatchPlanInfo without;
  ASSERT_EQ(plan_and_verify(plain, issue_step_a(), plain_buf, &without), "");
  EXPECT_FALSE(without.concurrent.tail);
  l.concurrent_tail_milli = 1000;
  Buffer buf(BatchPlanner::workspace_bytes(l));
  BatchPlanner planner(l);
  BatchPlanInfo info;
  ASSERT_EQ(plan_and_verify(planner, issue_step_a(), buf, &info), "");
  const BatchConcurrentForm& form = info.concurrent;
  ASSERT_EQ(form.prefill_ctas, 26);
  EXPECT_TRUE(form.tail);
  EXPECT_EQ(form.num_merges, 0);
  const Plan p = read_plan(buf.data() + form.plan_offset);
  const Plan q = read_plan(plain_buf.data() + without.concurrent.plan_offset);
  const int group_ctas = 33;
  auto items = [](const Plan& plan, int c) {
    return plan.cta_offsets[size_t(c) + 1] - plan.cta_offsets[size_t(c)];
  };
  int first_launch = 0, plain_first = 0, tail_items = 0;
  for (int c = 0; c < group_ctas; ++c) {
    (c < form.prefill_ctas ? first_launch : tail_items) += items(p, c);
    if (c < form.prefill_ctas) plain_first += items(q, c);
  }
  EXPECT_GT(tail_items, 0);
  EXPECT_LT(first_launch, plain_first);
  EXPECT_EQ(first_launch + tail_items, plain_first);
  // Never where the form splits work (a merge would sit between the two launches: the checker
  // holds the tail to merge-free forms).
  const BatchPlanInfo b = plan_checked(l, issue_step_b());
  EXPECT_TRUE(!b.concurrent.tail || b.concurrent.num_merges == 0);
  l.concurrent_tail_milli = -1;
  EXPECT_THROW(BatchPlanner{l}, Error);
}

// A fixed count is taken (clamped to the group's CTAs - 1); a faster decode rate leaves the
// prefill more CTAs.
TEST(BatchPlanConcurrent, FixedAndModelledSplit) {
  BatchPlanLimits l = llama8b(132);
  const Step s = mixed(4, 2048, 124, 4097);
  int previous = 0;
  for (int rate : {1500, 2250, 3000, 6000}) {
    l.concurrent_rate_milli = rate;
    const int ctas = plan_checked(l, s).concurrent.prefill_ctas;
    EXPECT_GE(ctas, previous) << "rate " << rate;
    previous = ctas;
  }
  l.concurrent_ctas = 20;
  EXPECT_EQ(plan_checked(l, s).concurrent.prefill_ctas, 20);
  l.concurrent_ctas = 1000;
  EXPECT_EQ(plan_checked(l, s).concurrent.prefill_ctas, 32);
}

// Steps the decode family cannot take unsplit in a few calls keep the single plan only.
TEST(BatchPlanConcurrent, NotWhereItCannotRun) {
  const BatchPlanLimits l = llama8b(132);
  // Switched off: none, and the plan buffer is the single plan's.
  BatchPlanLimits off = l;
  off.concurrent_decodes = BatchOverlap::kOff;
  EXPECT_EQ(plan_checked(off, mixed(4, 2048, 124, 4097)).concurrent.prefill_ctas, 0);
  EXPECT_LT(BatchPlanner::workspace_bytes(off), BatchPlanner::workspace_bytes(l));
  // Too few decodes for two (request, KV head) problems an SM left to them: one decode of one KV
  // head (32 / 1 heads) beside a chunk.
  {
    BatchPlanLimits mqa = l;
    mqa.num_kv_heads = 1;
    EXPECT_EQ(plan_checked(mqa, mixed(1, 2048, 1, 32768)).concurrent.prefill_ctas, 0);
    EXPECT_GT(plan_checked(mqa, mixed(2, 4096, 200, 1024)).concurrent.prefill_ctas, 0);
  }
  // Five runs: q_len 1, 2, 1, 2, 1 in turn.
  {
    std::vector<int32_t> q = {2048}, k = {2048};
    for (int r = 0; r < 5; ++r) {
      for (int i = 0; i < 30; ++i) q.push_back(1 + r % 2), k.push_back(4096);
    }
    EXPECT_EQ(plan_checked(l, step_of(q, k)).concurrent.prefill_ctas, 0);
    q.resize(1 + 4 * 30), k.resize(1 + 4 * 30);  // four runs: taken
    const BatchPlanInfo info = plan_checked(l, step_of(q, k));
    EXPECT_GT(info.concurrent.prefill_ctas, 0);
    EXPECT_EQ(info.concurrent.num_runs, 4);
  }
  // A decode of more than 16 tokens (GQA 1: 20 packed rows are a decode tile).
  {
    BatchPlanLimits mha = l;
    mha.num_qo_heads = mha.num_kv_heads = 8;
    EXPECT_GT(plan_checked(mha, mixed(4, 2048, 124, 4097, 16)).concurrent.prefill_ctas, 0);
    EXPECT_EQ(plan_checked(mha, mixed(4, 2048, 124, 4097, 20)).concurrent.prefill_ctas, 0);
  }
  // Dv != Dqk.
  BatchPlanLimits wide_v = l;
  wide_v.head_dim_v = 256;
  EXPECT_EQ(plan_checked(wide_v, mixed(4, 2048, 124, 4097)).concurrent.prefill_ctas, 0);
}

// Seeded mixed steps the form applies to: prefill chunks and decodes interleaved in up to four
// runs, causal or not, windows, grids of 132 and 264 CTAs; every plan and form checked.
TEST(BatchPlanConcurrent, SeededEligibleSteps) {
  int formed = 0;
  const int seeds = 300;
  for (int seed = 0; seed < seeds; ++seed) {
    std::mt19937_64 rng(0xc0c0 + seed);
    auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    BatchPlanLimits l = llama8b(draw(0, 1) ? 132 : 264);
    l.causal = draw(0, 3) != 0;
    if (draw(0, 3) == 0) l.window = {draw(0, 3000), l.causal ? 0 : draw(-1, 100)};
    l.concurrent_rate_milli = draw(1000, 4000);
    if (draw(0, 1) != 0) l.concurrent_tail_milli = draw(500, 2000);
    std::vector<int32_t> q, k;
    const int runs = draw(1, kMaxConcurrentDecodeRuns);
    for (int r = 0; r < runs; ++r) {
      const int chunks = draw(r == 0 ? 1 : 0, 2);
      for (int c = 0; c < chunks; ++c) {
        const int new_tokens = draw(100, 1500);
        q.push_back(new_tokens), k.push_back(new_tokens + draw(0, 3000));
      }
      const int decodes = draw(20, 60), q_len = draw(1, 4);
      for (int d = 0; d < decodes; ++d) q.push_back(q_len), k.push_back(q_len + draw(0, 5000));
    }
    const BatchPlanInfo info = plan_checked(l, step_of(q, k));
    formed += info.concurrent.prefill_ctas > 0;
  }
  EXPECT_GT(formed, seeds / 2);
}

}  // namespace
}  // namespace hopattn::plan
