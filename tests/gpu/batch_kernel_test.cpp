// The batch family's CUDA path: hopattn::BatchAttention with a CUDA device, planned on the host and
// run on the GPU, against the same step run by a CPU BatchAttention on fp32 copies of the same
// values (the 16-bit values, or the decoded fp8 e4m3 codes, with the same k / v scales;
// batch_kernel_check.hpp; the CPU path is tested against per-request fwd / decode in
// tests/cpu/batch_api_test.cpp). Data is fresh and seeded (test_seed(): HOPATTN_SEED reproduces a
// run); shapes are fixed. Outputs are poisoned before every run; every row of the step must be
// written and finite, rows past the step must stay poison, every case runs twice and the two
// results must be bitwise equal.
//
// Error bound (as the decode and mla kernel tests): inputs are exact on both sides; a plain
// 16-bit implementation (fp32 softmax, P rounded to the 16-bit dtype before P V, fp32
// accumulation, 16-bit output) is off by at most u vmax from P's rounding plus u vmax from the
// output's (u: unit roundoff of q's dtype, bf16 2^-8, fp16 2^-11; vmax: the largest |V| times the
// largest v scale). DESIGN.md allows twice that error: |out - ref| <= 4 u vmax. lse: |err| <=
// 1e-3, -inf only where the reference has -inf.
// fp8 e4m3 caches need no extra term: a code has 4 significant bits and a magnitude in [2^-9,
// 448], so it is exact in bf16 and fp16 and the kernel's widening to q's dtype loses nothing; the
// scales are exact in fp32, and the cases' scales times a code are exact even in bf16 (see
// head_scales in batch_kernel_check.cpp), wherever the kernel applies them. The fp8 cases draw
// codes below 2 in magnitude (logits of order 1, as the 16-bit cases'); the all-codes cases pair
// every finite code with small scales for the same reason. On 16-bit caches the scales are
// powers of two, or per-head values on fp16 where V times its scale rounded to fp16 would add at
// most u vmax: still inside the bound.
//
// Suites: BatchKernelGrid (the odd-shape grid: batch 1/17, q_len 1/239, keys 1/113, pages
// 1/16/64, GQA 1/5/8, causal bf16 and full fp16), BatchKernelFp8Grid (the same grid with an fp8
// e4m3 cache, bf16 q, causal, k / v scales 0.5 / 2, GQA 5/8), BatchKernelFeatures (layouts, masks,
// softcap, sinks, head dims, page sizes, GQA ratios, grids; fp8 e4m3 caches with those, with fp16
// q, every finite code, per-tensor and per-head scales; scales on 16-bit caches), BatchKernel
// (mixed prefill + decode steps, 16-bit and fp8 with per-head scales, 128 decodes of 8k keys,
// split keys and the merge (fp8 too), the plan upload variants, CUDA graph replay of a
// re-planned step, determinism across re-plans), BatchKernelErrors (what is rejected: e5m2 and
// int8 caches, small workspaces, uploads while capturing; and that a rejected call writes
// nothing).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "api/launch_variants.hpp"
#include "batch_kernel_check.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/batch.hpp"
#include "hopattn/error.hpp"
#include "kernels/batch/plan_staging.hpp"
#include "plan/batch_plan.hpp"
#include "plan/batch_plan_layout.hpp"
#include "plan/batch_workspace.hpp"

namespace hopattn::testing::batch_check {
namespace {

class BatchKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = cuda_device_problem();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

int uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// ---------------------------------------------------------------------------- odd-shape grid
// (batch, q_len, keys the first row sees, page size, GQA variant): GQA 0 = 2 KV heads x 1,
// 1 = 1 x 5, 2 = 2 x 8. A request's kv_len is q_len + keys - 1, so q_len 239 gives q_len ==
// kv_len (keys 1) and 113 cached keys; batch 17 adds idle slots (q_len 0 with kv_len 0 and with
// 40 cached keys) and lengths 0..3 keys (q close to kv) or up to 150 keys longer.
using GridParam = std::tuple<int, int, int, int, int>;
constexpr int kGridKvHeads[] = {2, 1, 2};
constexpr int kGridGroup[] = {1, 5, 8};

// The grid's step for p (its lengths and its name's stem); `edit` sets the rest (mask, dtypes,
// scales) and `suffix` names it.
template <class Edit>
StepSpec grid_step(const GridParam& p, const std::string& suffix, Edit&& edit) {
  const auto [batch, q_len, keys, page_size, gqa] = p;
  StepSpec s;
  s.name = "b" + std::to_string(batch) + "_q" + std::to_string(q_len) + "_k" +
           std::to_string(keys) + "_ps" + std::to_string(page_size) + "_gqa" +
           std::to_string(kGridGroup[gqa]) + suffix;
  edit(s);
  s.kv_heads = kGridKvHeads[gqa];
  s.group = kGridGroup[gqa];
  s.page_size = page_size;
  std::mt19937_64 shapes(1000003u * batch + 1009u * q_len + 101u * keys + 7u * page_size + gqa);
  for (int b = 0; b < batch; ++b) {
    if (batch > 1 && (b == 1 || b == 9)) {
      s.q_lens.push_back(0);
      s.kv_lens.push_back(b == 1 ? 0 : 40);
      continue;
    }
    const int extra = b == 0 ? 0 : b % 3 == 0 ? uniform(shapes, 0, 3) : uniform(shapes, 0, 150);
    s.q_lens.push_back(q_len);
    s.kv_lens.push_back(q_len + keys - 1 + extra);
  }
  s.sample_rows = batch > 1 ? 24 : 0;
  return s;
}

std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  constexpr const char* kGqa[] = {"mha", "gqa5", "gqa8"};
  const auto [b, q, k, ps, g] = info.param;
  return "b" + std::to_string(b) + "_q" + std::to_string(q) + "_k" + std::to_string(k) + "_ps" +
         std::to_string(ps) + "_" + kGqa[g];
}

class BatchKernelGrid : public GpuTestWithParam<GridParam> {};

TEST_P(BatchKernelGrid, MatchesCpuReference) {
  check_step(grid_step(GetParam(), "_causal_bf16", [](StepSpec&) {}), PlanMode::kUploadArrays);
  check_step(grid_step(GetParam(), "_full_fp16",
                       [](StepSpec& s) {
                         s.causal = false;
                         s.dtype = s.cache_dtype = DType::kFP16;
                       }),
             PlanMode::kPlain);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchKernelGrid,
                         ::testing::Combine(::testing::Values(1, 17), ::testing::Values(1, 239),
                                            ::testing::Values(1, 113), ::testing::Values(1, 16, 64),
                                            ::testing::Values(0, 1, 2)),
                         grid_name);

// The grid with an fp8 e4m3 cache under bf16 q, causal, per-tensor scales k 0.5 / v 2, GQA
// variants 1 and 2 (1 KV head x 5, 2 x 8).
class BatchKernelFp8Grid : public GpuTestWithParam<GridParam> {};

TEST_P(BatchKernelFp8Grid, MatchesCpuReference) {
  check_step(grid_step(GetParam(), "_causal_bf16_fp8_scales",
                       [](StepSpec& s) {
                         s.cache_dtype = DType::kFP8E4M3;
                         s.k_scale = 0.5f;
                         s.v_scale = 2.f;
                       }),
             PlanMode::kUploadTensors);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchKernelFp8Grid,
                         ::testing::Combine(::testing::Values(1, 17), ::testing::Values(1, 239),
                                            ::testing::Values(1, 113), ::testing::Values(1, 16, 64),
                                            ::testing::Values(1, 2)),
                         grid_name);

// ---------------------------------------------------------------------------- features
// A small mixed step (a single key, an idle slot, prefill chunks of 77, 130 and 239 tokens with
// and without cache, decodes of 1, 3 and 16 tokens) with one feature changed per case.
struct FeatureCase {
  StepSpec spec;
  PlanMode mode = PlanMode::kUploadArrays;
};
void PrintTo(const FeatureCase& c, std::ostream* os) { *os << describe(c.spec); }

std::vector<FeatureCase> feature_cases() {
  std::vector<FeatureCase> v;
  auto add = [&](std::string name, auto&& edit) {
    StepSpec s;
    s.name = std::move(name);
    s.q_lens = {1, 0, 77, 3, 16, 130, 1, 239};
    s.kv_lens = {1, 5, 300, 40, 16, 130, 900, 260};
    edit(s);
    constexpr PlanMode kModes[] = {PlanMode::kUploadArrays, PlanMode::kUploadTensors,
                                   PlanMode::kPlain};
    v.push_back({s, kModes[v.size() % 3]});
  };
  // An fp8 e4m3 cache under q's (16-bit) dtype, which the edit may change.
  auto add_fp8 = [&](std::string name, auto&& edit) {
    add(std::move(name), [&](StepSpec& s) {
      edit(s);
      s.cache_dtype = DType::kFP8E4M3;
    });
  };
  add("baseline", [](StepSpec&) {});
  add("hnd_ps16", [](StepSpec& s) { s.layout = KVLayout::kHND; });
  add("hnd_ps1", [](StepSpec& s) { s.layout = KVLayout::kHND, s.page_size = 1; });
  add("window_left100_right0", [](StepSpec& s) { s.window = {100, 0}; });
  add("window_left0", [](StepSpec& s) { s.window = {0, -1}; });
  add("noncausal", [](StepSpec& s) { s.causal = false; });
  add("noncausal_window20_5", [](StepSpec& s) { s.causal = false, s.window = {20, 5}; });
  add("softcap30", [](StepSpec& s) { s.softcap = 30.f; });
  add("sinks", [](StepSpec& s) { s.sinks = true; });
  add("sinks_softcap30_window100_hnd_fp16", [](StepSpec& s) {
    s.sinks = true, s.softcap = 30.f, s.window = {100, 0}, s.layout = KVLayout::kHND;
    s.dtype = s.cache_dtype = DType::kFP16;
  });
  add("fp16", [](StepSpec& s) { s.dtype = s.cache_dtype = DType::kFP16; });
  add("hd64", [](StepSpec& s) { s.head_dim = 64; });
  add("hd64_fp16_ps64_gqa5", [](StepSpec& s) {
    s.head_dim = 64, s.page_size = 64, s.kv_heads = 1, s.group = 5;
    s.dtype = s.cache_dtype = DType::kFP16;
  });
  add("hd256", [](StepSpec& s) { s.head_dim = 256; });
  add("hd256_fp16_hnd_sinks", [](StepSpec& s) {
    s.head_dim = 256, s.layout = KVLayout::kHND, s.sinks = true;
    s.dtype = s.cache_dtype = DType::kFP16;
  });
  add("ps256", [](StepSpec& s) { s.page_size = 256; });
  add("ps128_hnd", [](StepSpec& s) { s.page_size = 128, s.layout = KVLayout::kHND; });
  add("ps37_odd", [](StepSpec& s) { s.page_size = 37; });
  add("ps13_hnd_noncausal",
      [](StepSpec& s) { s.page_size = 13, s.layout = KVLayout::kHND, s.causal = false; });
  add("gqa16_mqa", [](StepSpec& s) { s.kv_heads = 1, s.group = 16; });
  add("gqa7_hkv3", [](StepSpec& s) { s.kv_heads = 3, s.group = 7; });
  add("gqa6_hkv2_sinks", [](StepSpec& s) { s.group = 6, s.sinks = true; });
  add("mha_hkv8", [](StepSpec& s) { s.kv_heads = 8, s.group = 1; });
  add("ctas1", [](StepSpec& s) { s.num_ctas = 1; });
  add("ctas7_sinks", [](StepSpec& s) { s.num_ctas = 7, s.sinks = true; });
  add("idle_only", [](StepSpec& s) { s.q_lens = {0, 0, 0}, s.kv_lens = {0, 17, 0}; });
  add("single_token", [](StepSpec& s) { s.q_lens = {1}, s.kv_lens = {1}; });
  add("q_equals_kv", [](StepSpec& s) { s.q_lens = {239, 64, 1}, s.kv_lens = {239, 64, 1}; });
  add("limits_above_step", [](StepSpec& s) { s.max_batch = 256, s.max_tokens = 16384; });
  add_fp8("fp8", [](StepSpec&) {});
  add_fp8("fp8_fp16q", [](StepSpec& s) { s.dtype = DType::kFP16; });
  add_fp8("fp8_scales", [](StepSpec& s) { s.k_scale = 0.25f, s.v_scale = 3.f; });
  add_fp8("fp8_per_head_scales",
          [](StepSpec& s) { s.per_head_scales = true, s.k_scale = 0.5f, s.v_scale = 2.f; });
  add_fp8("fp8_softcap30_per_head_scales", [](StepSpec& s) {
    s.softcap = 30.f, s.per_head_scales = true, s.k_scale = 2.f, s.v_scale = 0.5f;
  });
  // Every finite code: |K| up to 448 / 128 = 3.5 keeps the logits of order 1; vmax 448 / 64 = 7.
  add_fp8("fp8_all_codes",
          [](StepSpec& s) { s.fp8_all_codes = true, s.k_scale = 1.f / 128, s.v_scale = 1.f / 64; });
  add_fp8("fp8_all_codes_fp16q_per_head_scales", [](StepSpec& s) {
    s.dtype = DType::kFP16, s.fp8_all_codes = true, s.per_head_scales = true;
    s.k_scale = 1.f / 128, s.v_scale = 1.f / 64;
  });
  add_fp8("fp8_hnd_ps1", [](StepSpec& s) { s.layout = KVLayout::kHND, s.page_size = 1; });
  add_fp8("fp8_ps13_noncausal", [](StepSpec& s) { s.page_size = 13, s.causal = false; });
  add_fp8("fp8_ps64_hd64_gqa5",
          [](StepSpec& s) { s.page_size = 64, s.head_dim = 64, s.kv_heads = 1, s.group = 5; });
  add_fp8("fp8_hd256_sinks", [](StepSpec& s) { s.head_dim = 256, s.sinks = true; });
  add_fp8("fp8_hd256_hnd_fp16q",
          [](StepSpec& s) { s.head_dim = 256, s.layout = KVLayout::kHND, s.dtype = DType::kFP16; });
  add_fp8("fp8_window100_sinks", [](StepSpec& s) { s.window = {100, 0}, s.sinks = true; });
  add_fp8("fp8_gqa8_ctas7", [](StepSpec& s) { s.group = 8, s.num_ctas = 7; });
  // One CTA walks every item: decode tiles (consumer 1 widens V) and prefill tiles (warps 1..3
  // do) alternate over the same K and V rings.
  add_fp8("fp8_hnd_ps64_ctas1",
          [](StepSpec& s) { s.layout = KVLayout::kHND, s.page_size = 64, s.num_ctas = 1; });
  // Decodes only, long and short, two CTAs: many blocks through consumer 1's widening.
  add_fp8("fp8_decodes_only_ctas2", [](StepSpec& s) {
    s.q_lens = {1, 1, 4, 16, 0}, s.kv_lens = {4097, 1, 113, 2000, 0}, s.num_ctas = 2;
  });
  // Scales on 16-bit caches (dequantized the same way: real = stored * scale).
  add("bf16_kv_scales", [](StepSpec& s) { s.k_scale = 0.5f, s.v_scale = 2.f; });
  add("fp16_kv_per_head_scales", [](StepSpec& s) {
    s.dtype = s.cache_dtype = DType::kFP16;
    s.per_head_scales = true;
  });
  return v;
}

class BatchKernelFeatures : public GpuTestWithParam<FeatureCase> {};

TEST_P(BatchKernelFeatures, MatchesCpuReference) { check_step(GetParam().spec, GetParam().mode); }

INSTANTIATE_TEST_SUITE_P(Cases, BatchKernelFeatures, ::testing::ValuesIn(feature_cases()),
                         [](const auto& info) { return info.param.spec.name; });

// ---------------------------------------------------------------------------- serving steps
// A step of `prefills` chunks (q_len 100..2048 over 0..8192 cached keys; the first one a whole
// 2048-token prompt, the second 100 tokens after 8192) among `decodes` requests of 1..16 tokens
// (mostly 1) over up to 4000 cached keys. Prefill rows are sampled.
StepSpec mixed_step(std::string name, int prefills, int decodes, uint64_t shape_seed) {
  StepSpec s;
  s.name = std::move(name);
  std::mt19937_64 shapes(shape_seed);
  const int batch = prefills + decodes;
  int next_prefill = 0;
  for (int b = 0; b < batch; ++b) {
    const bool prefill = next_prefill < prefills && b == next_prefill * batch / prefills;
    int q, cached;
    if (prefill) {
      q = next_prefill == 0 ? 2048 : next_prefill == 1 ? 100 : uniform(shapes, 100, 2048);
      cached = next_prefill == 0 ? 0 : next_prefill == 1 ? 8192 : uniform(shapes, 0, 8192);
      ++next_prefill;
    } else {
      q = uniform(shapes, 0, 3) == 0 ? uniform(shapes, 2, 16) : 1;
      cached = uniform(shapes, 0, 9) == 0 ? 0 : uniform(shapes, 1, 4000);
    }
    s.q_lens.push_back(q);
    s.kv_lens.push_back(q + cached);
  }
  s.sample_rows = 40;
  return s;
}

// ---------------------------------------------------------------------------- side lane
// The side-lane kernel (BatchPlanLimits::side_decodes, kernels/batch/side_lane.cuh): decodes of
// at most 8 rows run on producer warps 2 and 3 while the consumers run the CTA's prefill tiles.
// Each case first plans its step on the host and requires decodes on the side lane (a case whose
// plan had none would pass without running it), then checks the run against the CPU reference.
int side_items(const StepSpec& s) {
  BatchAttention ba(config_of(s, cuda_device()));
  internal::BatchAttentionVariants::side_decodes(ba, plan::BatchOverlap::kOn);
  std::vector<uint64_t> buf(ba.plan_buffer_size() / 8 + 1);
  std::vector<int32_t> cu(1, 0);
  for (int32_t q : s.q_lens) cu.push_back(cu.back() + q);
  ba.plan(cu.data(), s.kv_lens.data(), s.batch(), buf.data(), buf.size() * 8);
  return ba.planned().num_side_items;
}

void check_side_step(StepSpec s, PlanMode mode = PlanMode::kUploadArrays) {
  s.side_lane = plan::BatchOverlap::kOn;
  ASSERT_GT(side_items(s), 0) << "no decode on the side lane: " << describe(s);
  check_step(s, mode);
}

// Two long prefill chunks (one split over several CTAs by the small grid) among decodes of 1..2
// tokens (rows group x q_len <= 8), over kv 0..3000; `edit` sets the features.
template <class Edit>
StepSpec side_step(std::string name, Edit&& edit) {
  StepSpec s;
  s.name = std::move(name);
  s.kv_heads = 2;
  s.group = 4;
  s.num_ctas = 8;
  s.q_lens = {1500, 1, 1, 2, 1, 0, 1, 700, 1, 2, 1, 1};
  s.kv_lens = {1500, 1, 113, 2000, 3000, 40, 17, 1800, 2049, 239, 16, 1023};
  s.sample_rows = 32;
  edit(s);
  return s;
}

class BatchKernelSide : public BatchKernel {};

TEST_F(BatchKernelSide, DecodesBesidePrefillBf16) {
  check_side_step(side_step("side_bf16", [](StepSpec&) {}));
}
TEST_F(BatchKernelSide, Fp16HndPages64) {
  check_side_step(side_step("side_fp16_hnd_ps64",
                            [](StepSpec& s) {
                              s.dtype = s.cache_dtype = DType::kFP16, s.layout = KVLayout::kHND;
                              s.page_size = 64;
                            }),
                  PlanMode::kPlain);
}
// Pages of 8 and 24 slots: a 16-key block spans two pages, so the side lane copies a row at a time
// (its other path, 16-byte pieces from one page base, serves the page sizes above).
TEST_F(BatchKernelSide, PagesSmallerThanABlock) {
  check_side_step(side_step("side_ps8", [](StepSpec& s) { s.page_size = 8; }));
  check_side_step(
      side_step("side_ps24_hnd", [](StepSpec& s) { s.page_size = 24, s.layout = KVLayout::kHND; }));
}
TEST_F(BatchKernelSide, WindowSoftcapSinks) {
  check_side_step(side_step("side_window100_softcap30_sinks", [](StepSpec& s) {
    s.window = {100, 0}, s.softcap = 30.f, s.sinks = true;
  }));
}
TEST_F(BatchKernelSide, NonCausalWindowPerHeadScales) {
  check_side_step(side_step("side_noncausal_window20_5_kv_scales", [](StepSpec& s) {
    s.causal = false, s.window = {20, 5}, s.per_head_scales = true;
    s.k_scale = 0.5f, s.v_scale = 2.f;
    s.sample_rows = 0;  // a window right of the diagonal: every row is checked
  }));
}
TEST_F(BatchKernelSide, Hd64Gqa8) {  // 8 rows a decode: every column of the side lane's MMAs
  check_side_step(side_step("side_hd64_gqa8", [](StepSpec& s) {
    s.head_dim = 64, s.kv_heads = 1, s.group = 8;
    for (int32_t& q : s.q_lens) q = q == 2 ? 1 : q;
  }));
}
TEST_F(BatchKernelSide, Gqa5Mha) {
  check_side_step(side_step("side_gqa5", [](StepSpec& s) { s.kv_heads = 1, s.group = 5; }));
  check_side_step(side_step("side_mha_hkv8", [](StepSpec& s) { s.kv_heads = 8, s.group = 1; }),
                  PlanMode::kUploadTensors);
}
TEST_F(BatchKernelSide, OneCtaAndMixedStep) {
  check_side_step(side_step("side_ctas1", [](StepSpec& s) { s.num_ctas = 1; }));
  StepSpec m = mixed_step("side_mixed_4_prefill_60_decode", 4, 60, 17);
  check_side_step(m);
}

// ---------------------------------------------------------------------------- partition
// Prefill items on the first CTAs of each group, decode items on the others
// (BatchPlanLimits::partition_decodes): each case requires a partitioned plan (a case whose plan
// was not would pass without running one), then checks the run against the CPU reference.
void check_partition_step(StepSpec s, PlanMode mode = PlanMode::kUploadArrays) {
  s.partition = plan::BatchOverlap::kOn;
  const BatchPlanSummary planned = check_step(s, mode);
  EXPECT_GT(planned.partition_ctas, 0) << "not partitioned: " << describe(s);
}

class BatchKernelPartition : public BatchKernel {};

TEST_F(BatchKernelPartition, MixedStepBf16AndFp16Hnd) {
  check_partition_step(side_step("partition_bf16", [](StepSpec&) {}));
  check_partition_step(side_step("partition_fp16_hnd_ps64_sinks",
                                 [](StepSpec& s) {
                                   s.dtype = s.cache_dtype = DType::kFP16;
                                   s.layout = KVLayout::kHND, s.page_size = 64, s.sinks = true;
                                 }),
                       PlanMode::kPlain);
}
TEST_F(BatchKernelPartition, Fp8PerHeadScalesGqa5) {
  StepSpec s = mixed_step("partition_fp8_per_head_scales_gqa5", 4, 60, 14);
  s.cache_dtype = DType::kFP8E4M3;
  s.kv_heads = 2, s.group = 5;
  s.per_head_scales = true, s.k_scale = 0.5f, s.v_scale = 2.f;
  check_partition_step(s, PlanMode::kUploadTensors);
}
// Decodes that cost more than the step's one prefill chunk: the order the planner picks itself.
TEST_F(BatchKernelPartition, AutoOnADecodeHeavyStep) {
  StepSpec s = side_step("partition_auto_decode_heavy", [](StepSpec& s) {
    s.q_lens = {300, 1, 3, 1, 2, 1, 1, 1, 4, 1, 1, 1};
    s.kv_lens = {300, 4000, 3001, 2500, 2, 113, 3900, 2049, 3500, 1, 4096, 3333};
  });
  const BatchPlanSummary planned = check_step(s, PlanMode::kUploadArrays);
  EXPECT_GT(planned.partition_ctas, 0) << "auto did not partition: " << describe(s);
}

// ------------------------------------------------------------------------- concurrent form
// BatchPlanLimits::concurrent_decodes: a mixed step whose decodes form a few runs of one q_len
// runs its prefill items alone on part of the grid and its decodes by the decode family on a
// second stream at the same time (outside a CUDA graph capture). Three chunks and three runs of
// decodes (q_len 1, 4, 1; kv_len = q_len, 113 and up to 4000 cached keys).
template <class Edit>
StepSpec concurrent_step(std::string name, Edit&& edit) {
  StepSpec s;
  s.name = std::move(name);
  std::mt19937_64 shapes(77);
  const int q_lens[3] = {1, 4, 1}, counts[3] = {30, 20, 14};
  for (int r = 0; r < 3; ++r) {
    s.q_lens.push_back(r == 0 ? 1500 : 300);
    s.kv_lens.push_back(r == 0 ? 1500 : 300 + uniform(shapes, 0, 3000));
    for (int d = 0; d < counts[r]; ++d) {
      const int q = q_lens[r];
      s.q_lens.push_back(q);
      s.kv_lens.push_back(d == 0 ? q : d == 1 ? 113 : q + uniform(shapes, 0, 4000));
    }
  }
  s.sample_rows = 32;
  s.concurrent = plan::BatchOverlap::kOn;
  edit(s);
  return s;
}

void check_concurrent_step(const StepSpec& s, PlanMode mode) {
  const BatchPlanSummary planned = check_step(s, mode);
  EXPECT_GT(planned.concurrent_ctas, 0) << "no concurrent form: " << describe(s);
}

class BatchKernelConcurrent : public BatchKernel {};

TEST_F(BatchKernelConcurrent, Bf16AndHd256) {
  check_concurrent_step(concurrent_step("concurrent_bf16", [](StepSpec&) {}),
                        PlanMode::kUploadArrays);
  check_concurrent_step(concurrent_step("concurrent_hd256", [](StepSpec& s) { s.head_dim = 256; }),
                        PlanMode::kPlain);
}
TEST_F(BatchKernelConcurrent, Fp16HndPages64SinksSoftcapGqa5) {
  check_concurrent_step(concurrent_step("concurrent_fp16_hnd_ps64_sinks_softcap_gqa5",
                                        [](StepSpec& s) {
                                          s.dtype = s.cache_dtype = DType::kFP16;
                                          s.layout = KVLayout::kHND, s.page_size = 64;
                                          s.sinks = true, s.softcap = 30.f, s.group = 5;
                                        }),
                        PlanMode::kPlain);
}
TEST_F(BatchKernelConcurrent, Fp8PerHeadScales) {
  check_concurrent_step(concurrent_step("concurrent_fp8_per_head_scales",
                                        [](StepSpec& s) {
                                          s.cache_dtype = DType::kFP8E4M3;
                                          s.kv_heads = 4, s.group = 2;
                                          s.per_head_scales = true;
                                          s.k_scale = 0.5f, s.v_scale = 2.f;
                                        }),
                        PlanMode::kUploadTensors);
}
TEST_F(BatchKernelConcurrent, Hd64PagesOfOneWindow) {
  check_concurrent_step(concurrent_step("concurrent_hd64_ps1_window",
                                        [](StepSpec& s) {
                                          s.head_dim = 64, s.page_size = 1;
                                          s.window = {300, 0};
                                        }),
                        PlanMode::kUploadArrays);
}

// The concurrent form's decodes by the narrow decode kernel (16-bit caches, <= 8 rows a request,
// pages of a multiple of 16 keys): the step's q_len 4 run at GQA 4 has 16 rows and stays with the
// decode family's choice, the q_len 1 runs take the narrow kernel.
TEST_F(BatchKernelConcurrent, NarrowDecodes) {
  check_concurrent_step(
      concurrent_step("concurrent_narrow_bf16",
                      [](StepSpec& s) { s.concurrent_decode_kernel = DecodeKernel::kNarrow; }),
      PlanMode::kUploadArrays);
  check_concurrent_step(concurrent_step("concurrent_narrow_fp16_hnd_ps64_window_sinks_gqa2",
                                        [](StepSpec& s) {
                                          s.concurrent_decode_kernel = DecodeKernel::kNarrow;
                                          s.dtype = s.cache_dtype = DType::kFP16;
                                          s.layout = KVLayout::kHND, s.page_size = 64;
                                          s.window = {700, 0}, s.sinks = true;
                                          s.softcap = 30.f, s.group = 2;
                                        }),
                        PlanMode::kPlain);
}

// An SM order of the card's SMs: ids descending (stride 0), or i * stride mod SMs (stride
// coprime to the count).
std::vector<int> sm_order(int stride) {
  int sms = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cuda_device().index),
            cudaSuccess);
  std::vector<int> order(static_cast<size_t>(sms));
  for (int i = 0; i < sms; ++i)
    order[static_cast<size_t>(i)] = stride == 0 ? sms - 1 - i : i * stride % sms;
  return order;
}

// The concurrent form with an SM order (BatchAttentionVariants::concurrent_sm_order): the prefill
// CTAs take their lists by the SM they land on and leave the order's first SMs to the decodes
// (kernels/batch/placement.cuh). Every list must run exactly once wherever the CTAs land: the
// outputs against the reference, and the claims the launch left (check_step).
TEST_F(BatchKernelConcurrent, PlacedBySmOrder) {
  const std::vector<int> descending = sm_order(0);
  check_concurrent_step(concurrent_step("concurrent_placed_descending",
                                        [&](StepSpec& s) { s.concurrent_sm_order = descending; }),
                        PlanMode::kUploadArrays);
  int stride = 7;
  while (std::gcd(stride, static_cast<int>(descending.size())) != 1) stride += 2;
  const std::vector<int> strided = sm_order(stride);
  check_concurrent_step(concurrent_step("concurrent_placed_strided_fp16_hnd_ps64_gqa5",
                                        [&](StepSpec& s) {
                                          s.concurrent_sm_order = strided;
                                          s.dtype = s.cache_dtype = DType::kFP16;
                                          s.layout = KVLayout::kHND, s.page_size = 64;
                                          s.group = 5;
                                        }),
                        PlanMode::kPlain);
  check_concurrent_step(concurrent_step("concurrent_placed_gpc_probe",
                                        [&](StepSpec& s) { s.concurrent_sm_gpc = true; }),
                        PlanMode::kUploadArrays);
  check_concurrent_step(concurrent_step("concurrent_placed_narrow",
                                        [&](StepSpec& s) {
                                          s.concurrent_sm_order = descending;
                                          s.concurrent_decode_kernel = DecodeKernel::kNarrow;
                                        }),
                        PlanMode::kUploadArrays);
}

// An SM order names each of the card's SMs once, or the setter refuses it before anything runs.
TEST_F(BatchKernelConcurrent, SmOrderMustNameEachSmOnce) {
  BatchAttentionConfig c;
  c.num_qo_heads = 8, c.num_kv_heads = 2, c.head_dim = 128, c.page_size = 16;
  c.device = cuda_device();
  BatchAttention ba(c);
  std::vector<int> order = sm_order(0);
  std::vector<int> short_order(order.begin(), order.end() - 1);
  std::vector<int> repeated = order;
  repeated[1] = repeated[0];
  std::vector<int> out_of_range = order;
  out_of_range[0] = static_cast<int>(order.size());
  for (const std::vector<int>* bad : {&short_order, &repeated, &out_of_range}) {
    try {
      internal::BatchAttentionVariants::concurrent_sm_order(ba, *bad);
      ADD_FAILURE() << "accepted a bad SM order of " << bad->size() << " ids";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kValue);
      EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << e.what();
    }
    EXPECT_EQ(internal::BatchAttentionVariants::concurrent_sm_placement(ba), nullptr);
  }
  internal::BatchAttentionVariants::concurrent_sm_order(ba, order);
  EXPECT_NE(internal::BatchAttentionVariants::concurrent_sm_placement(ba), nullptr);
  internal::BatchAttentionVariants::concurrent_sm_order(ba, {});
  EXPECT_EQ(internal::BatchAttentionVariants::concurrent_sm_placement(ba), nullptr);
}

// The concurrent form's tail: the prefill plan's later CTAs run after the decodes, in a second
// launch on the decode stream (with the narrow decodes too). Eight KV heads, two chunks of 512
// new tokens and 64 decodes: the whole step's plan splits nothing, which the tail needs.
StepSpec tail_step(std::string name, int group, int tail_milli) {
  StepSpec s;
  s.name = std::move(name);
  s.kv_heads = 8, s.group = group;
  s.q_lens = {512, 512};
  s.kv_lens = {512, 512 + 2048};
  std::mt19937_64 shapes(77);
  for (int d = 0; d < 64; ++d) {
    s.q_lens.push_back(1);
    s.kv_lens.push_back(d == 0 ? 1 : d == 1 ? 113 : 1 + uniform(shapes, 0, 4000));
  }
  s.sample_rows = 32;
  s.concurrent = plan::BatchOverlap::kOn;
  s.concurrent_tail_milli = tail_milli;
  return s;
}

TEST_F(BatchKernelConcurrent, Tail) {
  const BatchPlanSummary a =
      check_step(tail_step("concurrent_tail_bf16", 4, 1000), PlanMode::kUploadArrays);
  EXPECT_GT(a.concurrent_ctas, 0);
  EXPECT_TRUE(a.concurrent_tail) << "no tail planned";
  StepSpec narrow = tail_step("concurrent_tail_narrow_fp16_gqa2", 2, 1500);
  narrow.concurrent_decode_kernel = DecodeKernel::kNarrow;
  narrow.dtype = narrow.cache_dtype = DType::kFP16;
  const BatchPlanSummary b = check_step(narrow, PlanMode::kPlain);
  EXPECT_GT(b.concurrent_ctas, 0);
  EXPECT_TRUE(b.concurrent_tail) << "no tail planned";
}

// A graph captured on a step with a concurrent form replays the single plan (the eager run takes
// the concurrent form); both match the reference, and so does a replay after a re-plan.
TEST_F(BatchKernelConcurrent, GraphReplaysTheSinglePlan) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const StepSpec first = concurrent_step("concurrent_graph_captured", [](StepSpec&) {});
  const StepSpec second = concurrent_step("concurrent_graph_replayed", [](StepSpec& s) {
    std::reverse(s.q_lens.begin(), s.q_lens.end());
    std::reverse(s.kv_lens.begin(), s.kv_lens.end());
  });
  const Geometry g = cover(geometry_of(first), geometry_of(second));
  const auto h0 = make_host_step(first, g, rng);
  const auto h1 = make_host_step(second, g, rng);
  const Reference r0 = cpu_reference(*h0, rng), r1 = cpu_reference(*h1, rng);
  BatchAttention ba(config_of(first, cuda_device()));
  DeviceStep dev(*h0);
  const DeviceWorkspace ws(ba.workspace_size());
  const CudaStream stream;
  plan_step(ba, *h0, PlanMode::kUploadArrays, ws.ws, stream);
  EXPECT_GT(ba.planned().concurrent_ctas, 0) << "the captured step has no concurrent form";
  const Outputs eager = run_once(ba, dev, *h0, ws.ws, stream);
  expect_good(judge(*h0, eager, r0), "eager run (concurrent form)");
  dev.poison_outputs();
  GraphExec graph;
  graph.capture(stream, [&] { ba.run(dev.args(*h0, ws.ws), stream.api()); });
  graph.launch(stream);
  expect_good(judge(*h0, dev.download(*h0), r0), "replay (single plan)");
  dev.upload(*h1);
  plan_step(ba, *h1, PlanMode::kUploadTensors, ws.ws, stream);
  dev.poison_outputs();
  graph.launch(stream);
  expect_good(judge(*h1, dev.download(*h1), r1), "replay after a re-plan");
  // The eager form again, on the re-planned step.
  const Outputs again = run_once(ba, dev, *h1, ws.ws, stream);
  expect_good(judge(*h1, again, r1), "eager run after the replays");
}

// The concurrent form's split follows the card (BatchPlanLimits::hbm_gbps): a plan() that
// uploads reads the card's HBM bandwidth, and splits the (b) as a host planner told that
// bandwidth does (16 prefill CTAs of 33 on an H200, 21 on an H100 SXM).
TEST_F(BatchKernelConcurrent, SplitFollowsTheCardsBandwidth) {
  const int gbps = kernels::batch::card_hbm_gbps(cuda_device().index);
  EXPECT_GT(gbps, 1000) << "the card reports no HBM bandwidth";
  BatchAttentionConfig c;
  c.num_qo_heads = 32, c.num_kv_heads = 8, c.head_dim = 128, c.page_size = 16;
  c.device = cuda_device();
  std::vector<int32_t> cu = {0, 8192}, kv = {8192};
  for (int i = 0; i < 255; ++i) cu.push_back(cu.back() + 1), kv.push_back(2048 + 14336 * i / 254);
  BatchAttention ba(c);
  const DeviceWorkspace ws(ba.workspace_size());
  const CudaStream stream;
  ba.plan(cu.data(), kv.data(), 256, ws.ws, stream.api());
  plan::BatchPlanLimits l;
  l.num_qo_heads = 32, l.num_kv_heads = 8, l.head_dim = 128, l.page_size = 16;
  l.causal = true, l.num_ctas = plan::kBatchDefaultCtas, l.l2_bytes = plan::kBatchL2Bytes;
  l.hbm_gbps = gbps;
  plan::BatchPlanner planner(l);
  const size_t bytes = plan::BatchPlanner::workspace_bytes(l);
  std::vector<uint4> buffer(bytes / sizeof(uint4) + 1);  // 16-byte aligned (kBatchPlanAlign)
  const plan::BatchPlanInfo info = planner.plan(cu.data(), kv.data(), 256, buffer.data(), bytes);
  EXPECT_EQ(ba.planned().concurrent_ctas, info.concurrent.prefill_ctas) << gbps << " GB/s";
  EXPECT_GT(info.concurrent.prefill_ctas, 0);
  stream.sync("the plan upload");
}

TEST_F(BatchKernel, MixedPrefillAndDecodesBf16) {
  check_step(mixed_step("mixed_4_prefill_60_decode_bf16", 4, 60, 11), PlanMode::kUploadArrays);
}

// Every KV head with its own k and v scale (from bases 0.5 and 2; the scalars go along, and the
// per-head values override them).
TEST_F(BatchKernel, MixedPrefillAndDecodesFp8PerHeadScales) {
  StepSpec s = mixed_step("mixed_4_prefill_60_decode_fp8_per_head_scales", 4, 60, 13);
  s.cache_dtype = DType::kFP8E4M3;
  s.kv_heads = 4;
  s.group = 2;
  s.per_head_scales = true;
  s.k_scale = 0.5f;
  s.v_scale = 2.f;
  check_step(s, PlanMode::kUploadTensors);
}

TEST_F(BatchKernel, MixedPrefillAndDecodesFp16HndSinksGqa5) {
  StepSpec s = mixed_step("mixed_4_prefill_60_decode_fp16_hnd", 4, 60, 12);
  s.dtype = s.cache_dtype = DType::kFP16;
  s.layout = KVLayout::kHND;
  s.page_size = 64;
  s.kv_heads = 2;
  s.group = 5;
  s.sinks = true;
  s.softcap = 30.f;
  s.pool_at_allocation_start = true;  // the gather path on a large step
  check_step(s, PlanMode::kPlain);
}

// 128 decodes over 8k keys each; the reference checks every 8th request.
TEST_F(BatchKernel, PureDecode128x8k) {
  StepSpec s;
  s.name = "decode_128x8k";
  for (int b = 0; b < 128; ++b) {
    s.q_lens.push_back(1);
    s.kv_lens.push_back(8192 - 7 * (b % 4));
  }
  s.request_stride = 8;
  check_step(s, PlanMode::kUploadArrays);
}

// Steps too small to fill the default grid: the planner splits their keys over CTAs and the
// merge launch combines the partial states (a sink joins exactly one split; an fp8 cache's v
// scale applies to every split's partial output alike).
TEST_F(BatchKernel, SplitKeysGoThroughTheMerge) {
  std::vector<StepSpec> cases(5);
  cases[0].name = "split_b1_q1_kv32768_hkv8";
  cases[0].q_lens = {1};
  cases[0].kv_lens = {32768};
  cases[0].kv_heads = 8;
  cases[1] = cases[0];
  cases[1].name = "split_b1_q7_kv32768_gqa5_sinks_softcap30";
  cases[1].q_lens = {7};
  cases[1].group = 5;
  cases[1].sinks = true;
  cases[1].softcap = 30.f;
  cases[2].name = "split_b2_decode_and_prefill_hnd_fp16";
  cases[2].q_lens = {1, 200};
  cases[2].kv_lens = {30000, 9000};
  cases[2].kv_heads = 8;
  cases[2].group = 1;
  cases[2].layout = KVLayout::kHND;
  cases[2].dtype = cases[2].cache_dtype = DType::kFP16;
  cases[2].sample_rows = 24;
  cases[3].name = "split_b1_q1_kv20000_hd256_ps1";
  cases[3].q_lens = {1};
  cases[3].kv_lens = {20000};
  cases[3].head_dim = 256;
  cases[3].page_size = 1;
  cases[4] = cases[0];
  cases[4].name = "split_b1_q3_kv32768_hkv8_fp8_per_head_scales_sinks";
  cases[4].q_lens = {3};
  cases[4].cache_dtype = DType::kFP8E4M3;
  cases[4].per_head_scales = true;
  // A k base of 8 makes the softmax over 32768 keys peaked (rms logit 3 to 8 by head), so the
  // output is of order vmax, not its ~0 average, and a wrong merge weight or v scale shows in out,
  // not just lse.
  cases[4].k_scale = 8.f;
  cases[4].v_scale = 2.f;
  cases[4].sinks = true;
  constexpr PlanMode kModes[] = {PlanMode::kUploadArrays, PlanMode::kPlain,
                                 PlanMode::kUploadTensors, PlanMode::kUploadArrays,
                                 PlanMode::kUploadTensors};
  for (size_t i = 0; i < cases.size(); ++i) {
    const BatchPlanSummary p = check_step(cases[i], kModes[i]);
    EXPECT_GT(p.num_merges, 0) << cases[i].name << ": meant to split its keys";
    EXPECT_GE(p.num_splits_max, 2) << cases[i].name;
  }
}

// ---------------------------------------------------------------------------- plan upload
// Both ways to get the plan onto the device give the same bits: plan(..., workspace, stream),
// and a plain plan() whose run() uploads.
TEST_F(BatchKernel, UploadedAndRunUploadedPlansAgree) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  StepSpec s = mixed_step("upload_modes", 2, 20, 21);
  s.q_lens[0] = 300;
  s.kv_lens[0] = 20000;  // a long prefill: the plan holds merge records
  s.sinks = true;
  const auto h = make_host_step(s, geometry_of(s), rng);
  const Reference ref = cpu_reference(*h, rng);
  DeviceStep dev(*h);
  const CudaStream stream;
  std::vector<Outputs> results;
  for (PlanMode mode : {PlanMode::kUploadArrays, PlanMode::kUploadTensors, PlanMode::kPlain}) {
    SCOPED_TRACE(plan_mode_name(mode));
    BatchAttention ba(config_of(s, cuda_device()));
    const DeviceWorkspace ws(ba.workspace_size());
    plan_step(ba, *h, mode, ws.ws, stream);
    results.push_back(run_once(ba, dev, *h, ws.ws, stream));
    const Verdict v = judge(*h, results.back(), ref);
    expect_good(v, s.name);
    print_line(*h, ba.planned(), v, ref, plan_mode_name(mode));
    EXPECT_GT(ba.planned().num_merges, 0);
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1])) << "tensor and array plan() differ";
  EXPECT_TRUE(bitwise_equal(results[0], results[2])) << "uploaded and run-uploaded plans differ";
}

// After a plain plan(), run() takes any workspace and uploads the plan to it (batch.hpp): two
// fresh workspaces in turn, the same bits.
TEST_F(BatchKernel, PlainPlanRunsOnAnyWorkspace) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  StepSpec s = mixed_step("plain_plan_two_workspaces", 1, 12, 22);
  const auto h = make_host_step(s, geometry_of(s), rng);
  const Reference ref = cpu_reference(*h, rng);
  BatchAttention ba(config_of(s, cuda_device()));
  DeviceStep dev(*h);
  const CudaStream stream;
  const DeviceWorkspace a(ba.workspace_size()), b(ba.workspace_size());
  ba.plan(h->cu.data(), h->kv.data(), h->batch());
  const Outputs on_a = run_once(ba, dev, *h, a.ws, stream);
  const Outputs on_b = run_once(ba, dev, *h, b.ws, stream);
  expect_good(judge(*h, on_a, ref), "workspace a");
  expect_good(judge(*h, on_b, ref), "workspace b");
  EXPECT_TRUE(bitwise_equal(on_a, on_b));
}

// Re-running, re-planning the same step (uploaded or not) and running again: all bitwise equal.
TEST_F(BatchKernel, RerunsAndReplansAreBitwiseEqual) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  StepSpec s = mixed_step("determinism", 3, 30, 23);
  s.kv_lens[1] = s.q_lens[1] + 30000;  // something to split
  s.sinks = true;
  const auto h = make_host_step(s, geometry_of(s), rng);
  BatchAttention ba(config_of(s, cuda_device()));
  DeviceStep dev(*h);
  const CudaStream stream;
  const DeviceWorkspace ws(ba.workspace_size());
  plan_step(ba, *h, PlanMode::kUploadArrays, ws.ws, stream);
  const Outputs first = run_once(ba, dev, *h, ws.ws, stream);
  EXPECT_TRUE(bitwise_equal(first, run_once(ba, dev, *h, ws.ws, stream))) << "rerun";
  plan_step(ba, *h, PlanMode::kUploadTensors, ws.ws, stream);
  EXPECT_TRUE(bitwise_equal(first, run_once(ba, dev, *h, ws.ws, stream))) << "re-planned";
  plan_step(ba, *h, PlanMode::kPlain, ws.ws, stream);
  EXPECT_TRUE(bitwise_equal(first, run_once(ba, dev, *h, ws.ws, stream))) << "plain re-plan";
  EXPECT_GT(ba.planned().num_merges, 0);
}

// ---------------------------------------------------------------------------- CUDA graph
// run() captured once; later steps of other compositions (fewer requests, other lengths, more
// tokens) are planned into the same workspace on the same stream, their data written into the
// same buffers (sized for the limits), and the graph replayed: each replay gives the new step.
TEST_F(BatchKernel, GraphReplaysTheLastUploadedPlan) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  StepSpec base;
  base.kv_heads = 2;
  base.group = 4;
  base.sinks = true;
  base.max_batch = 16;
  base.max_tokens = 1024;
  auto step = [&](std::string name, std::vector<int32_t> q, std::vector<int32_t> kv) {
    StepSpec s = base;
    s.name = std::move(name);
    s.q_lens = std::move(q);
    s.kv_lens = std::move(kv);
    return s;
  };
  const std::vector<StepSpec> steps = {
      step("graph_captured_b12", {1, 1, 3, 0, 200, 1, 16, 1, 1, 77, 1, 1},
           {500, 1, 40, 10, 800, 3000, 16, 2, 1100, 77, 64, 9}),
      step("graph_replay_b7", {300, 1, 1, 5, 0, 128, 1}, {300, 4000, 60, 900, 7, 1200, 1}),
      step("graph_replay_b12", {1, 2, 1, 1, 1, 64, 1, 1, 1, 1, 1, 500},
           {5000, 2, 77, 1, 300, 64, 20, 4, 2500, 1, 700, 600}),
      step("graph_replay_b3_split", {1, 0, 9}, {20000, 3, 9}),
  };
  Geometry g{base.max_tokens, 1, base.max_batch, 1};
  for (const StepSpec& s : steps) g = cover(g, geometry_of(s));
  std::vector<std::unique_ptr<HostStep>> hosts;
  std::vector<Reference> refs;
  for (const StepSpec& s : steps) {
    hosts.push_back(make_host_step(s, g, rng));
    refs.push_back(cpu_reference(*hosts.back(), rng));
  }

  BatchAttention ba(config_of(base, cuda_device()));
  DeviceStep dev(*hosts[0]);
  const DeviceWorkspace ws(ba.workspace_size());
  const CudaStream stream;
  // An eager run first (and a check of it), then the capture.
  plan_step(ba, *hosts[0], PlanMode::kUploadArrays, ws.ws, stream);
  const Outputs eager = run_once(ba, dev, *hosts[0], ws.ws, stream);
  const Verdict v0 = judge(*hosts[0], eager, refs[0]);
  expect_good(v0, "eager run of the captured step");
  // Whether the captured plan had merge records or not, later plans with and without them must
  // replay (run() may not bake the merge launch in or out by the captured plan's shape).
  print_line(*hosts[0], ba.planned(), v0, refs[0], " (eager, then captured)");
  // The steps' plans switch order between the capture and the replays: captured partitioned
  // (prefill and decodes on separate CTAs), replayed spread, partitioned and pure decode, so a
  // launch that depended on the captured plan's order would show here.
  EXPECT_GT(ba.planned().partition_ctas, 0) << "the captured step is not partitioned";
  int replays_unpartitioned = 0;
  dev.poison_outputs();
  GraphExec graph;
  graph.capture(stream, [&] { ba.run(dev.args(*hosts[0], ws.ws), stream.api()); });
  graph.launch(stream);
  const Outputs replay0 = dev.download(*hosts[0]);
  expect_good(judge(*hosts[0], replay0, refs[0]), "first replay");
  EXPECT_TRUE(bitwise_equal(eager, replay0)) << "the replay differs from the eager run";

  for (size_t i = 1; i < steps.size(); ++i) {
    SCOPED_TRACE(describe(steps[i]));
    dev.upload(*hosts[i]);
    plan_step(ba, *hosts[i], i % 2 ? PlanMode::kUploadArrays : PlanMode::kUploadTensors, ws.ws,
              stream);
    dev.poison_outputs();
    graph.launch(stream);
    const Outputs got = dev.download(*hosts[i]);
    const Verdict v = judge(*hosts[i], got, refs[i]);
    expect_good(v, steps[i].name);
    print_line(*hosts[i], ba.planned(), v, refs[i], " (graph replay)");
    if (ba.planned().partition_ctas == 0) ++replays_unpartitioned;
  }
  EXPECT_GT(replays_unpartitioned, 0) << "every replayed plan was partitioned";
}

// ---------------------------------------------------------------------------- rejected calls
// A rejected call raises hopattn::Error before any launch: out and lse keep their poison.
void expect_untouched(DeviceStep& dev, const HostStep& h, const std::string& what) {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const Outputs o = dev.download(h);
  const auto* out = static_cast<const uint8_t*>(o.out.view().data());
  const auto* lse = static_cast<const uint8_t*>(o.lse.view().data());
  const size_t out_bytes = static_cast<size_t>(o.out.numel()) * dtype_size(o.out.dtype());
  size_t written = 0;
  for (size_t i = 0; i < out_bytes; ++i) written += out[i] != 0xff;
  for (size_t i = 0; i < static_cast<size_t>(o.lse.numel()) * 4; ++i) written += lse[i] != 0xff;
  EXPECT_EQ(written, 0u) << what << ": a rejected call wrote " << written << " output bytes";
}

template <class Fn>
void expect_error(Fn&& fn, const std::string& what, std::vector<ErrorKind> kinds) {
  try {
    fn();
    ADD_FAILURE() << what << ": no hopattn::Error";
  } catch (const Error& e) {
    bool ok = kinds.empty();
    for (ErrorKind k : kinds) ok = ok || e.kind() == k;
    EXPECT_TRUE(ok) << what << ": unexpected error kind " << static_cast<int>(e.kind()) << ": "
                    << e.what();
    std::printf("[ batch ] %s: %s\n", what.c_str(), e.what());
  }
}

class BatchKernelErrors : public BatchKernel {
 protected:
  StepSpec small_step() const {
    StepSpec s;
    s.name = "rejected";
    s.q_lens = {1, 40, 3};
    s.kv_lens = {100, 40, 500};
    return s;
  }
};

// fp8 e4m3 is the CUDA path's one 8-bit cache format (the features and grids run it); e5m2 and
// int8 caches (CPU only) are rejected on CUDA, by the validator (kType) or the launcher
// (kNotImplemented).
TEST_F(BatchKernelErrors, E5m2AndInt8CachesThrowAndWriteNothing) {
  std::mt19937_64 rng(test_seed());
  for (DType kv : {DType::kFP8E5M2, DType::kInt8}) {
    StepSpec s = small_step();
    s.cache_dtype = kv;
    s.name = std::string("kv_") + dtype_name(kv);
    const auto h = make_host_step(s, geometry_of(s), rng);
    BatchAttention ba(config_of(s, cuda_device()));
    DeviceStep dev(*h);
    const DeviceWorkspace ws(ba.workspace_size());
    const CudaStream stream;
    plan_step(ba, *h, PlanMode::kUploadArrays, ws.ws, stream);
    stream.sync("plan upload");
    dev.poison_outputs();
    expect_error([&] { ba.run(dev.args(*h, ws.ws), stream.api()); }, s.name + " run",
                 {ErrorKind::kNotImplemented, ErrorKind::kType});
    expect_untouched(dev, *h, s.name);
  }
}

// A workspace below workspace_size() (or none) is refused by run() and by the uploading plan().
TEST_F(BatchKernelErrors, SmallWorkspaceThrowsAndWritesNothing) {
  std::mt19937_64 rng(test_seed());
  const StepSpec s = small_step();
  const auto h = make_host_step(s, geometry_of(s), rng);
  BatchAttention ba(config_of(s, cuda_device()));
  DeviceStep dev(*h);
  const DeviceWorkspace ws(ba.workspace_size());
  const CudaStream stream;
  ASSERT_GT(ws.ws.bytes, 0u);
  const Workspace small{ws.ws.data, ws.ws.bytes - 1};
  const Workspace none{nullptr, ws.ws.bytes};

  dev.poison_outputs();
  expect_error([&] { ba.run(dev.args(*h, ws.ws), stream.api()); }, "run before any plan()",
               {ErrorKind::kValue});
  ba.plan(h->cu.data(), h->kv.data(), h->batch());
  expect_error([&] { ba.run(dev.args(*h, small), stream.api()); }, "run, small workspace",
               {ErrorKind::kValue});
  expect_error([&] { ba.run(dev.args(*h, none), stream.api()); }, "run, null workspace",
               {ErrorKind::kValue});
  expect_untouched(dev, *h, "run with a small or null workspace");
  // batch.hpp names the kind kInvalidArgument, which ErrorKind does not have: any kind is taken.
  expect_error([&] { ba.plan(h->cu.data(), h->kv.data(), h->batch(), small, stream.api()); },
               "plan(workspace, stream), small workspace", {});
  stream.sync("after the rejected plan");

  // The object still serves the step afterwards.
  const Reference ref = cpu_reference(*h, rng);
  plan_step(ba, *h, PlanMode::kUploadArrays, ws.ws, stream);
  expect_good(judge(*h, run_once(ba, dev, *h, ws.ws, stream), ref), "after the rejected calls");
}

// run() refuses to upload a plain plan() while its stream is being captured; the stream and the
// object work afterwards.
TEST_F(BatchKernelErrors, RunRefusesToUploadWhileCapturing) {
  std::mt19937_64 rng(test_seed());
  const StepSpec s = small_step();
  const auto h = make_host_step(s, geometry_of(s), rng);
  BatchAttention ba(config_of(s, cuda_device()));
  DeviceStep dev(*h);
  const DeviceWorkspace ws(ba.workspace_size());
  const CudaStream stream;
  dev.poison_outputs();
  ba.plan(h->cu.data(), h->kv.data(), h->batch());
  check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal),
             "cudaStreamBeginCapture");
  bool threw = false;
  try {
    ba.run(dev.args(*h, ws.ws), stream.api());
  } catch (const Error& e) {
    threw = true;
    std::printf("[ batch ] run while capturing: %s\n", e.what());
  }
  cudaGraph_t g = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream.get(), &g);
  if (g != nullptr) cudaGraphDestroy(g);
  cudaGetLastError();
  EXPECT_TRUE(threw) << "run() uploaded (or tried to) inside a capture";
  EXPECT_EQ(end, cudaSuccess) << "the refused run() invalidated the capture: "
                              << cudaGetErrorString(end);
  expect_untouched(dev, *h, "refused run");

  const Reference ref = cpu_reference(*h, rng);
  plan_step(ba, *h, PlanMode::kUploadArrays, ws.ws, stream);
  expect_good(judge(*h, run_once(ba, dev, *h, ws.ws, stream), ref), "after the refused run");
}

// The uploading plan() is for CUDA configurations only (no device needed to check this).
TEST(BatchKernelHost, UploadingPlanRejectsCpuConfiguration) {
  StepSpec s;
  s.q_lens = {1};
  s.kv_lens = {10};
  BatchAttention ba(config_of(s, Device{}));
  std::vector<unsigned char> bytes(1 << 20);
  const int32_t cu[] = {0, 1}, kv[] = {10};
  EXPECT_THROW(ba.plan(cu, kv, 1, Workspace{bytes.data(), bytes.size()}, nullptr), Error);
}

}  // namespace
}  // namespace hopattn::testing::batch_check
