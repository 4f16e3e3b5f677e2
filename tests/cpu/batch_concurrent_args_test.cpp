// The decode calls of BatchAttention's concurrent form (api/batch_concurrent.*), on the CPU: where
// run() takes that form on a GPU, each run of consecutive decodes of one q_len goes to the decode
// family as views of run()'s tensors. Here those views, run through hopattn::decode on CPU
// tensors, must reproduce exactly the rows the step's per-request reference gives, write nothing
// else, and carry the configuration's mask, softcap, scale, sinks and KV scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "api/batch_concurrent.hpp"
#include "batch_case.hpp"
#include "hopattn/api.hpp"
#include "hopattn/batch.hpp"
#include "plan/decode_plan.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {
namespace {

using batch_case::BatchCase;

// The step's decode runs as the planner forms them (plan::BatchConcurrentForm): maximal runs of
// consecutive requests of one q_len in 1..kDecodeMaxQLen, after the prefill chunks.
std::vector<plan::BatchDecodeRun> decode_runs(const BatchCase& c) {
  std::vector<plan::BatchDecodeRun> runs;
  for (int b = 0; b < static_cast<int>(c.q_lens.size()); ++b) {
    const int q = c.q_lens[static_cast<size_t>(b)];
    if (q < 1 || q > plan::kDecodeMaxQLen) continue;
    if (!runs.empty() && runs.back().end == b && runs.back().q_len == q) {
      runs.back().end = b + 1;
    } else {
      runs.push_back({b, b + 1, q});
    }
  }
  return runs;
}

// Poisons the rows of `runs` in out / lse (the step's other rows keep run()'s values).
void poison_rows(batch_case::BatchStep& s, const std::vector<plan::BatchDecodeRun>& runs, int heads,
                 int dv) {
  for (const plan::BatchDecodeRun& r : runs) {
    for (int64_t row = s.cu[static_cast<size_t>(r.begin)]; row < s.cu[static_cast<size_t>(r.end)];
         ++row) {
      for (int64_t h = 0; h < heads; ++h) {
        s.lse.set(row * heads + h, std::nan(""));
        for (int64_t d = 0; d < dv; ++d) s.out.set((row * heads + h) * dv + d, std::nan(""));
      }
    }
  }
}

void check(const BatchCase& c, std::mt19937_64& rng) {
  SCOPED_TRACE(batch_case::describe(c));
  const auto step = batch_case::make_step(c, rng);
  const BatchAttentionConfig config = batch_case::config_of(c);
  BatchAttention ba(config);
  ba.plan(step->cu_t, step->kv_t);
  ba.run(step->args);  // every row, so that the decode rows are the only ones left to write
  const std::vector<plan::BatchDecodeRun> runs = decode_runs(c);
  ASSERT_FALSE(runs.empty());
  poison_rows(*step, runs, c.q_heads(), c.dv());
  for (const plan::BatchDecodeRun& r : runs) {
    const DecodeArgs a = batch_concurrent::decode_args(step->args, config, step->cu.data(), r);
    ASSERT_EQ(a.q.size(0), r.end - r.begin);
    ASSERT_EQ(a.q.size(1), r.q_len);
    const DecodeOptions opts = batch_concurrent::decode_options(config, a, DecodeKernel::kAuto);
    EXPECT_EQ(opts.num_splits, 1);
    EXPECT_EQ(opts.kernel, DecodeKernel::kAuto);
    // The narrow kernel where the run's call takes it (the CPU reference computes either).
    const DecodeOptions narrow = batch_concurrent::decode_options(config, a, DecodeKernel::kNarrow);
    EXPECT_EQ(narrow.num_splits, 1);
    EXPECT_EQ(narrow.kernel == DecodeKernel::kNarrow, plan::narrow_kernel_takes(a, opts));
    decode(a, narrow);
  }
  const std::string why =
      batch_case::compare(c, *step, batch_case::per_request_reference(c, *step));
  EXPECT_TRUE(why.empty()) << why;
}

TEST(BatchConcurrentArgs, DecodeRunsReproduceTheirRows) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  // A prefill chunk, runs of 1-token and 3-token decodes, an empty slot between them, a window,
  // softcap, scale and sinks; GQA 4, pages of 16.
  BatchCase c;
  c.kv_heads = 2;
  c.group = 4;
  c.window = {60, -1};
  c.softcap = 6.f;
  c.scale = 0.3f;
  c.sinks = true;
  c.q_dtype = c.cache_dtype = DType::kBF16;
  c.q_lens = {40, 1, 1, 1, 0, 3, 3, 1};
  c.kv_lens = {90, 200, 17, 1, 5, 130, 3, 64};
  check(c, rng);
  // fp8 e4m3 cache with per-head scales, HND pages of 64, GQA 5, no causal mask.
  c = BatchCase();
  c.kv_heads = 2;
  c.group = 5;
  c.page_size = 64;
  c.layout = KVLayout::kHND;
  c.causal = false;
  c.cache_dtype = DType::kFP8E4M3;
  c.per_head_scales = true;
  c.q_lens = {2, 2, 70, 16, 16};
  c.kv_lens = {300, 2, 70, 16, 400};
  check(c, rng);
  // Pages of 1 and decodes only between two chunks.
  c = BatchCase();
  c.kv_heads = 1;
  c.group = 8;
  c.page_size = 1;
  c.q_lens = {1, 1, 1, 25, 1};
  c.kv_lens = {33, 9, 1, 60, 70};
  check(c, rng);
}

}  // namespace
}  // namespace hopattn::testing
