// BatchAttention on CPU tensors against hopattn's fwd and decode entry points run on each request
// alone (batch_case.hpp): seeded random mixed steps (prefill chunks, decodes, speculative decodes,
// empty requests; GQA 1/5/8; page sizes 1/16/64; NHD/HND; causal, windows, softcap, sinks; fp32,
// bf16, fp8 and int8 caches), steps whose keys the planner splits across CTAs (so merge records
// and the sink's placement on one split are exercised), and one object re-planned across steps
// of different compositions, with its own and with a caller's plan buffer.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "batch_case.hpp"
#include "hopattn/batch.hpp"
#include "plan/batch_plan.hpp"
#include "plan/batch_workspace.hpp"

namespace hopattn::testing {
namespace {

using batch_case::BatchCase;
using batch_case::compare;
using batch_case::config_of;
using batch_case::describe;
using batch_case::make_step;
using batch_case::per_request_reference;

int uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return *(values.begin() + uniform(rng, 0, static_cast<int>(values.size()) - 1));
}

// Requests of every kind a serving step holds: empty slots (no q tokens, some cache), decodes of
// 1..4 tokens, speculative decodes of 5..16 and prefill chunks of 17..64 tokens, each over a
// cache holding up to a few hundred earlier tokens (sometimes none: a first chunk).
void random_requests(std::mt19937_64& rng, BatchCase& c) {
  const int batch = uniform(rng, 1, 7);
  for (int b = 0; b < batch; ++b) {
    const int kind = uniform(rng, 0, 9);
    const int q = kind == 0   ? 0
                  : kind <= 5 ? uniform(rng, 1, 4)
                  : kind <= 7 ? uniform(rng, 5, 16)
                              : uniform(rng, 17, 64);
    const int cached = uniform(rng, 0, 3) == 0 ? 0 : uniform(rng, 1, 320);
    c.q_lens.push_back(q);
    c.kv_lens.push_back(q + cached);
  }
}

BatchCase random_case(std::mt19937_64& rng) {
  BatchCase c;
  c.group = pick(rng, {1, 5, 8});
  c.kv_heads = c.group == 8 ? 1 : pick(rng, {1, 2});
  c.page_size = pick(rng, {1, 16, 64});
  c.layout = pick(rng, {KVLayout::kNHD, KVLayout::kHND});
  c.causal = uniform(rng, 0, 3) != 0;
  const Window windows[] = {{-1, -1}, {-1, -1}, {37, -1}, {100, 0}, {20, 5}, {0, 0}};
  c.window = windows[uniform(rng, 0, 5)];
  if (uniform(rng, 0, 2) == 0) c.softcap = 5.f;
  if (uniform(rng, 0, 2) == 0) c.scale = 0.2f;
  c.sinks = uniform(rng, 0, 2) == 0;
  const int dtype = uniform(rng, 0, 9);
  if (dtype == 0) c.q_dtype = c.cache_dtype = DType::kBF16;
  if (dtype == 1) c.cache_dtype = DType::kFP8E4M3;
  if (dtype == 2) c.cache_dtype = DType::kInt8;
  c.per_head_scales = (dtype == 1 || dtype == 2) && uniform(rng, 0, 1) == 0;
  c.cache_pad = pick(rng, {0, 0, 3});
  // The default grid splits long key ranges to fill 264 CTAs; small grids split less or not at all.
  c.num_ctas = pick(rng, {0, 0, 7, 1});
  random_requests(rng, c);
  return c;
}

::testing::AssertionResult run_and_compare(BatchAttention& ba, const BatchCase& c,
                                           std::mt19937_64& rng, void* plan_buffer = nullptr) {
  const auto step = make_step(c, rng);
  if (plan_buffer != nullptr) {
    ba.plan(step->cu_t, step->kv_t, plan_buffer, ba.plan_buffer_size());
  } else {
    ba.plan(step->cu_t, step->kv_t);
  }
  ba.run(step->args);
  const std::string why = compare(c, *step, per_request_reference(c, *step));
  if (!why.empty()) return ::testing::AssertionFailure() << describe(c) << ": " << why;
  return ::testing::AssertionSuccess();
}

TEST(BatchApi, RandomMixedStepsMatchPerRequestReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  int merges = 0;
  for (int i = 0; i < 60; ++i) {
    const BatchCase c = random_case(rng);
    SCOPED_TRACE(describe(c));
    BatchAttention ba(config_of(c));
    ASSERT_TRUE(run_and_compare(ba, c, rng));
    EXPECT_EQ(ba.planned().batch, static_cast<int>(c.q_lens.size()));
    merges += ba.planned().num_merges;
  }
  RecordProperty("merge_records", merges);
}

// One long decode and one prefill chunk on the default grid: the planner cuts their keys into
// chunks across CTAs, so the result goes through the merge records, and each row's sink must
// join exactly one of its chunks.
TEST(BatchApi, SplitKeysMergeToTheUnsplitResult) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (int variant = 0; variant < 4; ++variant) {
    BatchCase c;
    c.kv_heads = 2;
    c.group = variant == 1 ? 5 : 4;
    c.page_size = variant == 2 ? 1 : 16;
    c.layout = variant == 3 ? KVLayout::kHND : KVLayout::kNHD;
    c.sinks = variant != 2;
    c.window = variant == 2 ? Window{300, -1} : Window{};
    c.softcap = variant == 3 ? 8.f : 0.f;
    c.q_lens = {1, 0, 40, 3};
    c.kv_lens = {1500, 10, 700, 3};
    SCOPED_TRACE(describe(c));
    BatchAttention ba(config_of(c));
    ASSERT_TRUE(run_and_compare(ba, c, rng));
    EXPECT_GT(ba.planned().num_merges, 0) << "this step is meant to split";
    EXPECT_GE(ba.planned().num_splits_max, 2);
  }
}

// One object serves steps of different compositions (B, lengths, kinds) in turn, its plan
// rewritten in place each time; the same with a caller-owned plan buffer.
TEST(BatchApi, ReplanForAnotherStepWithTheSameObject) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  BatchCase base;
  base.kv_heads = 2;
  base.group = 4;
  base.sinks = true;
  base.window = {200, -1};
  BatchAttention ba(config_of(base));
  std::vector<unsigned char> caller(ba.plan_buffer_size() + 16);
  void* aligned = caller.data() + (16 - reinterpret_cast<uintptr_t>(caller.data()) % 16) % 16;
  const std::vector<std::vector<int>> q_lens = {{1, 1, 1, 1, 1, 1}, {50, 0, 7}, {}, {1, 64}, {0}};
  const std::vector<std::vector<int>> kv_lens = {
      {900, 3, 40, 1, 200, 17}, {50, 5, 300}, {}, {1, 600}, {0}};
  for (int round = 0; round < 2; ++round) {
    for (size_t s = 0; s < q_lens.size(); ++s) {
      BatchCase c = base;
      c.q_lens = q_lens[s];
      c.kv_lens = kv_lens[s];
      SCOPED_TRACE(describe(c));
      ASSERT_TRUE(run_and_compare(ba, c, rng, round == 1 ? aligned : nullptr));
      EXPECT_EQ(ba.planned().batch, static_cast<int>(c.q_lens.size()));
    }
  }
}

TEST(BatchApi, HeadDimVDiffersFromHeadDim) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  BatchCase c;
  c.head_dim = 128;
  c.head_dim_v = 64;
  c.kv_heads = 1;
  c.group = 2;
  c.q_lens = {3, 20, 1};
  c.kv_lens = {400, 20, 1};
  BatchAttention ba(config_of(c));
  EXPECT_TRUE(run_and_compare(ba, c, rng));
}

// Sizes are pure functions of the configuration: the plan buffer is the planner's, and a CUDA
// run's workspace holds the plan's copy, the partial states and one semaphore per merge record
// in disjoint aligned regions; CPU runs take none.
TEST(BatchApi, WorkspaceSizesFromTheLimitsAlone) {
  BatchAttentionConfig cfg;
  cfg.num_qo_heads = 32;
  cfg.num_kv_heads = 8;
  cfg.head_dim = 128;
  plan::BatchPlanLimits limits;
  limits.num_qo_heads = 32;
  limits.num_kv_heads = 8;
  limits.head_dim = 128;
  limits.num_ctas = plan::kBatchDefaultCtas;
  EXPECT_EQ(BatchAttention::plan_buffer_size(cfg), plan::BatchPlanner::workspace_bytes(limits));
  EXPECT_EQ(BatchAttention::workspace_size(cfg), 0u);
  EXPECT_EQ(BatchAttention(cfg).workspace_size(), 0u);

  cfg.device = {DeviceType::kCUDA, 0};
  const plan::BatchWorkspaceLayout w = plan::batch_workspace_layout(limits);
  const plan::BatchPlanCapacity cap = plan::BatchPlanner::capacity(limits);
  EXPECT_EQ(BatchAttention::workspace_size(cfg), w.total_bytes);
  EXPECT_EQ(BatchAttention(cfg).workspace_size(), w.total_bytes);
  EXPECT_EQ(w.plan_bytes, cap.plan_bytes);
  EXPECT_EQ(w.partial_o_bytes, cap.partial_o_bytes);
  EXPECT_EQ(w.partial_lse_bytes, cap.partial_lse_bytes);
  EXPECT_EQ(w.semaphore_bytes, static_cast<size_t>(cap.max_merges) * sizeof(int32_t));
  const size_t starts[] = {w.plan_offset, w.partial_o_offset, w.partial_lse_offset,
                           w.semaphore_offset, w.total_bytes};
  const size_t sizes[] = {w.plan_bytes, w.partial_o_bytes, w.partial_lse_bytes, w.semaphore_bytes};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(starts[i] % plan::kBatchWorkspaceAlign, 0u) << "region " << i;
    EXPECT_LE(starts[i] + sizes[i], starts[i + 1]) << "region " << i;
  }
  cfg.max_tokens = 1024;  // smaller limits, smaller buffers
  EXPECT_LT(BatchAttention::workspace_size(cfg), w.total_bytes);
}

}  // namespace
}  // namespace hopattn::testing
