// The decode launch plan (src/plan/decode_plan.hpp) as the public decode_workspace_size answers
// it: CUDA TensorViews without memory behind them (shapes are all the plan reads), in builds with
// and without CUDA alike. A split call needs a nonzero workspace laid out as the kernel indexes it,
// and no SM count asks for more than the reported size.
#include <gtest/gtest.h>

#include <cstdint>

#include "hopattn/api.hpp"
#include "plan/decode_plan.hpp"
#include "validate_testing.hpp"

namespace hopattn::testing {
namespace {

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Llama-3-8B heads (32 / 8), D = 128, bf16 q and cache, pages of 16: `batch` requests of up to
// `max_pages` pages each. Every view is a CUDA one with no memory.
DecodeArgs cuda_decode(int64_t batch, int64_t max_pages, DType cache = DType::kBF16,
                       int64_t q_len = 1) {
  constexpr int64_t kPageSize = 16, kHq = 32, kHkv = 8, kD = 128;
  DecodeArgs a;
  a.q = TensorView(nullptr, DType::kBF16, {batch, q_len, kHq, kD}, kCuda0);
  a.out = TensorView(nullptr, DType::kBF16, {batch, q_len, kHq, kD}, kCuda0);
  a.lse = TensorView(nullptr, DType::kFP32, {batch, q_len, kHq}, kCuda0);
  const int64_t pages = batch * max_pages;
  a.k_cache = TensorView(nullptr, cache, {pages, kPageSize, kHkv, kD}, kCuda0);
  a.v_cache = TensorView(nullptr, cache, {pages, kPageSize, kHkv, kD}, kCuda0);
  a.pages.block_table = TensorView(nullptr, DType::kInt32, {batch, max_pages}, kCuda0);
  a.pages.kv_lens = TensorView(nullptr, DType::kInt32, {batch}, kCuda0);
  return a;
}

TEST(PlanDecode, SplitCallsNeedTheWorkspaceTheKernelIndexes) {
  const DecodeOptions opts;
  const DecodeArgs a = cuda_decode(1, 512);  // one request of up to 8192 keys: 8 problems
  const size_t bytes = decode_workspace_size(a, opts);
  const plan::DecodePlan p = plan::plan_decode(a, opts, plan::kHopperMaxSms);
  EXPECT_EQ(p.requests, 1);
  EXPECT_EQ(p.rows_per_request, 4);
  EXPECT_EQ(p.rows_per_cta, 16);
  EXPECT_EQ(p.problems, 8);
  EXPECT_EQ(p.num_splits, 16);  // 8 x 16 CTAs, one an SM over a 16-bit cache, 8 tiles each
  EXPECT_EQ(p.config, 2);       // the small-grid kernel
  ASSERT_GT(bytes, 0u);
  EXPECT_EQ(bytes, p.workspace_bytes);
  EXPECT_EQ(decode_workspace_size(a, opts), bytes);  // a pure function: same answer again

  // [semaphores][partial o: problems x splits x rows x D fp32][partial lse: ... fp32]
  const size_t rows = size_t(p.problems) * p.num_splits * p.rows_per_cta;
  EXPECT_EQ(p.semaphore_bytes, align256(size_t(p.problems) * 4));
  EXPECT_EQ(p.partial_o_offset, p.semaphore_bytes);
  EXPECT_EQ(p.partial_lse_offset, p.partial_o_offset + align256(rows * 128 * 4));
  EXPECT_EQ(bytes, p.partial_lse_offset + align256(rows * 4));
}

// bf16 q over a bf16, fp8 e4m3 or fp8 e5m2 cache has the three-CTA kernel; an int8 cache does
// not, so it keeps the two-CTA one whatever the grid. Five tokens x 4 heads = 20 rows: calls of
// <= 16 rows run the small-grid kernel (two CTAs an SM) instead.
TEST(PlanDecode, TheThreeCtaKernelRunsWhereTheGridFillsAThirdSlot) {
  const DecodeOptions opts;
  for (DType cache : {DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8}) {
    const bool built = cache != DType::kInt8;
    int seen[4] = {};
    for (int64_t batch : {1, 4, 8, 32, 33, 64, 128}) {
      for (int64_t max_pages : {4, 512, 2048}) {
        const plan::DecodePlan p =
            plan::plan_decode(cuda_decode(batch, max_pages, cache, /*q_len=*/5), opts, 132);
        ASSERT_FALSE(p.small);
        const bool third_slot = p.problems * p.num_splits > 2 * 132;
        EXPECT_EQ(p.config, built && third_slot ? 3 : 2)
            << dtype_name(cache) << ", " << batch << " x " << max_pages << " pages";
        ++seen[p.config];
      }
    }
    EXPECT_GT(seen[2], 0) << dtype_name(cache);
    EXPECT_EQ(seen[3] > 0, built) << dtype_name(cache);
  }
}

// The small-grid kernel: every call it takes (beam width 1, no tree mask, <= 16 rows a request,
// D = 64 or 128, any cache), whatever the batch; it counts its splits by two CTAs an SM, so that
// small batches fill one wave of its slots (over 8-bit caches, grids beyond that wave run its
// three-CTA instance).
TEST(PlanDecode, TheSmallGridKernelTakesEveryCallOfSixteenRows) {
  const DecodeOptions opts;
  const DecodeArgs one = cuda_decode(1, 512);  // 8 problems of up to 8192 keys
  const plan::DecodePlan p = plan::plan_decode(one, opts, 132);
  EXPECT_TRUE(p.small);
  EXPECT_EQ(p.config, 2);
  // A 16-bit cache: one CTA an SM (16 splits, 128 CTAs), not one wave of 132 x 2 slots.
  EXPECT_EQ(p.num_splits, 16);
  EXPECT_EQ(p.workspace_bytes, decode_workspace_size(one, opts));
  // Smaller parts take no more splits than the workspace holds.
  for (int sms : {66, 78, 114, 120, 131}) {
    EXPECT_LE(plan::plan_decode(one, opts, sms).num_splits, 16) << sms;
  }
  // Two requests (16 problems) keep the wave model's count: 16 x 16 CTAs exceed 132.
  EXPECT_EQ(plan::plan_decode(cuda_decode(2, 512), opts, 132).num_splits, 16);

  for (int64_t batch : {1, 2, 4, 8, 16, 17, 64, 128}) {
    for (int64_t max_pages : {1, 64, 512, 2048}) {
      const plan::DecodePlan q = plan::plan_decode(cuda_decode(batch, max_pages), opts, 132);
      ASSERT_TRUE(q.small) << batch << " x " << max_pages;
      EXPECT_EQ(q.config, 2) << batch << " x " << max_pages;
      // Fewer problems than SMs: the splits fill one wave of two CTAs an SM.
      if (batch <= 16) EXPECT_LE(q.problems * q.num_splits, 2 * 132) << batch;
    }
  }

  for (DType cache : {DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8}) {
    const plan::DecodePlan q = plan::plan_decode(cuda_decode(1, 512, cache), opts, 132);
    EXPECT_TRUE(q.small) << dtype_name(cache);
    EXPECT_EQ(q.config, 2) << dtype_name(cache);       // not the three-CTA fp8 kernel
    EXPECT_EQ(q.num_splits, 32) << dtype_name(cache);  // 8-bit: both CTAs of an SM convert
    // Its three-CTA instance (e4m3, int8) where that runs the grid in fewer waves than two CTAs
    // an SM, with the splits and workspace of two.
    const bool has_three = cache != DType::kFP8E5M2;
    for (int64_t batch : {8, 32, 33, 40, 48, 64, 80, 96, 128, 256}) {
      const DecodeArgs big = cuda_decode(batch, 512, cache);
      const plan::DecodePlan b = plan::plan_decode(big, opts, 132);
      ASSERT_TRUE(b.small);
      const int64_t ctas = b.problems * b.num_splits;
      const bool fewer = (ctas + 395) / 396 < (ctas + 263) / 264;
      EXPECT_EQ(b.config, has_three && fewer ? 3 : 2) << dtype_name(cache) << ", batch " << batch;
      EXPECT_EQ(b.workspace_bytes, decode_workspace_size(big, opts));
    }
    // Measured rows (8 KV heads, no split): B = 48 and 128 save a wave, B = 64 (512 CTAs: two
    // waves either way) and B = 32 (one) do not.
    EXPECT_EQ(plan::plan_decode(cuda_decode(128, 512, cache), opts, 132).config, has_three ? 3 : 2);
    EXPECT_EQ(plan::plan_decode(cuda_decode(48, 512, cache), opts, 132).config, has_three ? 3 : 2);
    EXPECT_EQ(plan::plan_decode(cuda_decode(64, 512, cache), opts, 132).config, 2);
    EXPECT_EQ(plan::plan_decode(cuda_decode(32, 512, cache), opts, 132).config, 2);
  }

  // What it does not take: a tree mask, beams, more than 16 rows, D = 256.
  DecodeArgs tree = one;
  tree.tree_mask = TensorView(nullptr, DType::kBool, {1, 1, 1}, kCuda0);
  EXPECT_FALSE(plan::plan_decode(tree, opts, 132).small);
  DecodeArgs beams = cuda_decode(4, 64);
  beams.shared_kv_lens = TensorView(nullptr, DType::kInt32, {2}, kCuda0);
  DecodeOptions two_beams;
  two_beams.beam_width = 2;
  EXPECT_FALSE(plan::plan_decode(beams, two_beams, 132).small);
  DecodeArgs rows = one;  // 5 tokens x 4 heads = 20 rows
  rows.q = TensorView(nullptr, DType::kBF16, {1, 5, 32, 128}, kCuda0);
  EXPECT_FALSE(plan::plan_decode(rows, opts, 132).small);
  rows.q = TensorView(nullptr, DType::kBF16, {1, 4, 32, 128}, kCuda0);  // 16 rows
  EXPECT_TRUE(plan::plan_decode(rows, opts, 132).small);
  DecodeArgs d256 = one;
  d256.q = TensorView(nullptr, DType::kBF16, {1, 1, 32, 256}, kCuda0);
  d256.k_cache = TensorView(nullptr, DType::kBF16, {512, 16, 8, 256}, kCuda0);
  d256.v_cache = d256.k_cache;
  EXPECT_FALSE(plan::plan_decode(d256, opts, 132).small);
}

// The three-CTA rule counts waves: 264 slots of two an SM on 132 SMs, 396 of three.
TEST(PlanDecode, ThreeCtasOnlyWhereTheySaveAWave) {
  EXPECT_FALSE(plan::small_three_ctas_take_fewer_waves(0, 132));
  EXPECT_FALSE(plan::small_three_ctas_take_fewer_waves(264, 132));  // one wave either way
  EXPECT_TRUE(plan::small_three_ctas_take_fewer_waves(265, 132));   // 2 -> 1
  EXPECT_TRUE(plan::small_three_ctas_take_fewer_waves(396, 132));
  EXPECT_FALSE(plan::small_three_ctas_take_fewer_waves(397, 132));  // 2 and 2
  EXPECT_FALSE(plan::small_three_ctas_take_fewer_waves(512, 132));
  EXPECT_TRUE(plan::small_three_ctas_take_fewer_waves(640, 132));   // 3 -> 2
  EXPECT_TRUE(plan::small_three_ctas_take_fewer_waves(1024, 132));  // 4 -> 3
  EXPECT_FALSE(plan::small_three_ctas_take_fewer_waves(1024, 0));
}

TEST(PlanDecode, NoSmCountNeedsMoreThanTheReportedWorkspace) {
  const DecodeOptions opts;
  // 16 requests: 128 problems, the small-grid kernel's for more than 128 SMs only.
  for (int64_t batch : {1, 3, 8, 16, 32}) {
    for (int64_t max_pages : {4, 64, 512, 2048}) {
      for (DType cache : {DType::kBF16, DType::kFP8E4M3}) {
        const DecodeArgs a = cuda_decode(batch, max_pages, cache);
        const size_t bytes = decode_workspace_size(a, opts);
        const int bound = plan::plan_decode(a, opts, plan::kHopperMaxSms).num_splits;
        for (int sms = 1; sms <= 2 * plan::kHopperMaxSms; ++sms) {
          const plan::DecodePlan p = plan::plan_decode(a, opts, sms);
          ASSERT_LE(p.num_splits, bound) << batch << " x " << max_pages << " pages, " << sms;
          ASSERT_LE(p.workspace_bytes, bytes) << batch << " x " << max_pages << " pages, " << sms;
          ASSERT_EQ(p.workspace_bytes == 0, p.num_splits == 1);
        }
      }
    }
  }
}

TEST(PlanDecode, ForcedSplitsAndHostCalls) {
  DecodeOptions opts;
  const DecodeArgs a = cuda_decode(4, 2);  // 32 keys: too short for the heuristic to split
  EXPECT_EQ(decode_workspace_size(a, opts), 0u);
  opts.num_splits = 7;
  const plan::DecodePlan p = plan::plan_decode(a, opts, 1);
  EXPECT_EQ(p.num_splits, 7);
  EXPECT_EQ(decode_workspace_size(a, opts), p.workspace_bytes);
  EXPECT_GT(p.workspace_bytes, 0u);

  DecodeArgs host = a;  // CPU tensors run the reference: no workspace
  host.q = on_device(a.q, Device{});
  EXPECT_EQ(decode_workspace_size(host, opts), 0u);
}

// DecodeOptions::kernel forces either kernel; kSmall counts its splits by its own slots at any
// batch, and no SM count needs more workspace than the call reports.
TEST(PlanDecode, ForcedKernels) {
  DecodeOptions opts;
  opts.kernel = DecodeKernel::kTiles;
  EXPECT_FALSE(plan::plan_decode(cuda_decode(1, 512), opts, 132).small);
  opts.kernel = DecodeKernel::kSmall;
  for (int64_t batch : {1, 16, 17, 64, 128}) {
    for (DType cache : {DType::kBF16, DType::kFP8E4M3}) {
      const DecodeArgs a = cuda_decode(batch, 512, cache);
      const size_t bytes = decode_workspace_size(a, opts);
      for (int sms = 1; sms <= 2 * plan::kHopperMaxSms; sms += 7) {
        const plan::DecodePlan p = plan::plan_decode(a, opts, sms);
        ASSERT_TRUE(p.small) << batch;
        // Three CTAs an SM only over an e4m3 / int8 cache, where that saves a wave.
        const bool three = cache == DType::kFP8E4M3 &&
                           plan::small_three_ctas_take_fewer_waves(p.problems * p.num_splits, sms);
        ASSERT_EQ(p.config, three ? 3 : 2) << batch << " on " << sms << " SMs";
        ASSERT_LE(p.workspace_bytes, bytes) << batch << " on " << sms << " SMs";
      }
    }
  }
  DecodeArgs tree = cuda_decode(1, 512);
  tree.tree_mask = TensorView(nullptr, DType::kBool, {1, 1, 1}, kCuda0);
  EXPECT_TRUE(throws_error([&] { plan::plan_decode(tree, opts, 132); }, ErrorKind::kNotImplemented,
                           "for DecodeKernel::kSmall"));
}

// kNarrow: one split and no workspace whatever the batch and the SM count; kAuto never takes it;
// refused where it does not take the call (more than 8 rows, an 8-bit cache, several splits).
TEST(PlanDecode, NarrowKernel) {
  DecodeOptions opts;
  opts.kernel = DecodeKernel::kNarrow;
  for (int64_t batch : {1, 17, 128}) {
    const DecodeArgs a = cuda_decode(batch, 512, DType::kBF16, 2);  // 2 tokens x GQA 4: 8 rows
    ASSERT_TRUE(plan::narrow_kernel_takes(a, opts));
    for (int sms : {1, 66, 132}) {
      const plan::DecodePlan p = plan::plan_decode(a, opts, sms);
      EXPECT_TRUE(p.narrow && !p.small) << batch << " on " << sms << " SMs";
      EXPECT_EQ(p.num_splits, 1);
      EXPECT_EQ(p.workspace_bytes, 0u);
    }
    EXPECT_EQ(decode_workspace_size(a, opts), 0u);
    EXPECT_FALSE(plan::plan_decode(a, DecodeOptions{}, 132).narrow);
  }
  const auto refused = [&](const DecodeArgs& a, const DecodeOptions& o) {
    return throws_error([&] { plan::plan_decode(a, o, 132); }, ErrorKind::kNotImplemented,
                        "for DecodeKernel::kNarrow");
  };
  EXPECT_TRUE(refused(cuda_decode(1, 512, DType::kBF16, 3), opts));  // 12 rows
  EXPECT_TRUE(refused(cuda_decode(1, 512, DType::kFP8E4M3), opts));
  DecodeOptions split = opts;
  split.num_splits = 4;
  EXPECT_TRUE(refused(cuda_decode(1, 512), split));
}

TEST(PlanDecode, HeadDimsWithoutAKernelAreRefused) {
  DecodeArgs a = cuda_decode(1, 512);
  a.q = TensorView(nullptr, DType::kBF16, {1, 1, 32, 96}, kCuda0);
  EXPECT_TRUE(throws_error([&] { decode_workspace_size(a, DecodeOptions{}); },
                           ErrorKind::kNotImplemented, "expected head_dim 64, 128 or 256, got 96"));
}

}  // namespace
}  // namespace hopattn::testing
