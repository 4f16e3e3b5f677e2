// The batch planner's errors: limits out of range, and steps it was not made for (too many
// requests or q tokens, kv_len < q_len, malformed offsets, a workspace too small or misaligned).
// Each message names the argument with what was expected and what was given, and a failed plan()
// leaves the caller's buffer untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "batch_plan_check.hpp"
#include "hopattn/error.hpp"
#include "plan/batch_plan.hpp"

namespace hopattn::plan {
namespace {

using Parts = std::vector<std::string>;  // pieces the message must contain

void expect_error(const std::function<void()>& call, ErrorKind kind, const Parts& parts) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one with \"" << parts.front() << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message \"" << e.what() << "\" lacks \"" << part << "\"";
    }
  }
}

TEST(BatchPlanErrors, Limits) {
  const BatchPlanLimits good = check::llama8b();
  struct Case {
    std::function<void(BatchPlanLimits&)> change;
    ErrorKind kind;
    Parts parts;
  };
  const std::vector<Case> cases = {
      {[](BatchPlanLimits& l) { l.num_kv_heads = 5; },
       ErrorKind::kValue,
       {"hopattn.BatchAttention: num_kv_heads: expected a KV head count >= 1 that divides "
        "num_qo_heads = 32, got 5"}},
      {[](BatchPlanLimits& l) { l.num_kv_heads = 0; },
       ErrorKind::kValue,
       {"num_kv_heads", "got 0"}},
      {[](BatchPlanLimits& l) { l.num_qo_heads = 256, l.num_kv_heads = 1; },
       ErrorKind::kNotImplemented,
       {"at most 128 q heads per KV head, got 256 / 1 = 256"}},
      {[](BatchPlanLimits& l) { l.head_dim = 96; },
       ErrorKind::kNotImplemented,
       {"head_dim: expected 64, 128 or 256, got 96"}},
      {[](BatchPlanLimits& l) { l.head_dim_v = 512; },
       ErrorKind::kNotImplemented,
       {"head_dim_v", "got 512"}},
      {[](BatchPlanLimits& l) { l.page_size = 0; },
       ErrorKind::kValue,
       {"page_size: expected 1..256, got 0"}},
      {[](BatchPlanLimits& l) { l.page_size = 257; }, ErrorKind::kValue, {"page_size", "got 257"}},
      {[](BatchPlanLimits& l) {
         l.window = {-2, 0};
       },
       ErrorKind::kValue,
       {"window: expected left and right >= -1 (-1 = unbounded), got (-2, 0)"}},
      {[](BatchPlanLimits& l) { l.num_ctas = 0; }, ErrorKind::kValue, {"num_ctas", "got 0"}},
      {[](BatchPlanLimits& l) { l.side_lane_cost = 0; },
       ErrorKind::kValue,
       {"side_lane_cost", "got 0"}},
      {[](BatchPlanLimits& l) { l.decode_cta_rate_milli = 999; },
       ErrorKind::kValue,
       {"decode_cta_rate_milli: expected 1000..64000, got 999"}},
      {[](BatchPlanLimits& l) { l.partition_ctas = -1; },
       ErrorKind::kValue,
       {"partition_ctas: expected 0..65536 (0: modelled), got -1"}},
      {[](BatchPlanLimits& l) { l.max_batch = 0; }, ErrorKind::kValue, {"max_batch", "got 0"}},
      {[](BatchPlanLimits& l) { l.max_tokens = -1; }, ErrorKind::kValue, {"max_tokens", "got -1"}},
      // 2^29 - 1 tokens (the most at GQA ratio 4): 2^24 prefill tiles x 8 KV heads, whose loads
      // could overflow the keys of the LPT tree on 264 CTAs.
      {[](BatchPlanLimits& l) { l.max_tokens = (1 << 29) - 1; },
       ErrorKind::kValue,
       {"max_tokens: expected limits whose CTA loads fit the planner's 64-bit keys",
        "work items over 264 CTAs"}},
  };
  for (const Case& c : cases) {
    BatchPlanLimits l = good;
    c.change(l);
    expect_error([&] { BatchPlanner planner(l); }, c.kind, c.parts);
    expect_error([&] { BatchPlanner::workspace_bytes(l); }, c.kind, c.parts);
  }
  EXPECT_NO_THROW(BatchPlanner{good});
}

TEST(BatchPlanErrors, StepInputsAndWorkspace) {
  BatchPlanLimits l = check::llama8b();
  l.max_batch = 4;
  l.max_tokens = 64;
  BatchPlanner planner(l);
  check::Buffer buf(BatchPlanner::workspace_bytes(l));
  const size_t size = buf.usable();
  const std::string need = std::to_string(size);
  const std::vector<int32_t> kv = {100, 100, 100, 100, 100};
  auto untouched = [&] {
    const unsigned char* p = buf.data();
    return std::all_of(p, p + size + check::kGuardBytes,
                       [](unsigned char c) { return c == check::kFill; });
  };
  struct Case {
    std::function<void()> call;
    Parts parts;
  };
  const std::vector<int32_t> five = {0, 1, 2, 3, 4, 5}, over = {0, 30, 70}, start = {1, 2},
                             down = {0, 10, 5}, q_over = {30, 40}, q_neg = {3, -1},
                             q_short = {8, 8}, kv_short = {8, 3};
  const std::vector<Case> cases = {
      {[&] { planner.plan(five.data(), kv.data(), 5, buf.data(), size); },
       {"hopattn.BatchAttention.plan: batch: expected 0..max_batch = 4 requests (the planner's "
        "limit), got 5"}},
      {[&] { planner.plan(over.data(), kv.data(), 2, buf.data(), size); },
       {"cu_seqlens_q[2]: expected <= max_tokens = 64 q tokens (the planner's limit), got 70"}},
      {[&] { planner.plan_q_lens(q_over.data(), kv.data(), 2, buf.data(), size); },
       {"q_lens: expected a total <= max_tokens = 64 q tokens (the planner's limit), got 70 by "
        "q_lens[1]"}},
      {[&] { planner.plan_q_lens(q_short.data(), kv_short.data(), 2, buf.data(), size); },
       {"kv_lens[1]: expected >= q_len = 8 (kv_lens include the new tokens), got 3"}},
      {[&] { planner.plan(start.data(), kv.data(), 1, buf.data(), size); },
       {"cu_seqlens_q[0]: expected 0, got 1"}},
      {[&] { planner.plan(down.data(), kv.data(), 2, buf.data(), size); },
       {"cu_seqlens_q[2]: expected >= cu_seqlens_q[1] = 10 (non-decreasing offsets), got 5"}},
      {[&] { planner.plan_q_lens(q_neg.data(), kv.data(), 2, buf.data(), size); },
       {"q_lens[1]: expected >= 0, got -1"}},
      {[&] { planner.plan(over.data(), nullptr, 1, buf.data(), size); },
       {"kv_lens: expected int32 [1], got null"}},
      {[&] { planner.plan(nullptr, kv.data(), 1, buf.data(), size); },
       {"cu_seqlens_q: expected int32 [2], got null"}},
      {[&] { planner.plan(over.data(), kv.data(), 1, buf.data(), size - 1); },
       {"workspace: expected at least " + need + " bytes (BatchPlanner::workspace_bytes), got " +
        std::to_string(size - 1) + " bytes"}},
      {[&] { planner.plan(over.data(), kv.data(), 1, buf.data() + 4, size - 16); },
       {"workspace: expected a 16-byte aligned buffer"}},
      {[&] { planner.plan(over.data(), kv.data(), 1, nullptr, size); },
       {"workspace: expected a host buffer, got null"}},
  };
  for (const Case& c : cases) {
    buf.refill();
    expect_error(c.call, ErrorKind::kValue, c.parts);
    EXPECT_TRUE(untouched()) << "a failed plan() wrote to the workspace: " << c.parts.front();
  }
  // The limits themselves are served: B = max_batch, max_tokens q tokens.
  const std::vector<int32_t> full = {0, 16, 32, 48, 64};
  EXPECT_EQ(check::plan_and_verify(planner, check::Step{full, {16, 16, 100, 64}}, buf), "");
}

}  // namespace
}  // namespace hopattn::plan
