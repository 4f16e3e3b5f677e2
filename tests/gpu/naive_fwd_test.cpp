// The naive GPU forward (tests/naive_gpu) against the CPU reference on fresh random inputs over
// a grid of odd shapes: batch 1 and 17, q_len 1 and 239, kv_len 0, 1, 113, q_len > kv_len under
// the causal mask, GQA ratios 1, 5 and 8, dense / varlen / paged (page size 1, 16, 64; NHD and
// HND; block table and CSR), padded strides, fp16, Dqk != Dv, window, softcap and sinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "gpu_test_support.hpp"
#include "naive_gpu/naive_attention.hpp"
#include "reference/reference.hpp"

namespace hopattn::testing {
namespace {

enum class KvMode { kDense, kVarlen, kPaged };

struct FwdCase {
  std::string name;
  int batch = 1, q_len = 1, kv_len = 1;
  int hq = 2, hkv = 2, d = 128, dv = 128;
  KvMode mode = KvMode::kDense;  // varlen and paged use ragged (per-request) lengths
  int page_size = 16;
  KVLayout layout = KVLayout::kNHD;
  bool csr = false;
  bool sinks = false;
  bool padded = false;  // q/k/v/out rows padded: strides differ from the shape's
  DType dtype = DType::kBF16;
  AttentionOptions opts;

  explicit FwdCase(std::string n) : name(std::move(n)) {}
  // Builder-style modifiers: each returns a modified copy, so the grid below reads as one line
  // per case.
  FwdCase shape(int b, int q, int kv) const {
    FwdCase c = *this;
    c.batch = b;
    c.q_len = q;
    c.kv_len = kv;
    return c;
  }
  FwdCase heads(int q, int kv) const {
    FwdCase c = *this;
    c.hq = q;
    c.hkv = kv;
    return c;
  }
  FwdCase dims(int qk, int v) const {
    FwdCase c = *this;
    c.d = qk;
    c.dv = v;
    return c;
  }
  FwdCase varlen() const {
    FwdCase c = *this;
    c.mode = KvMode::kVarlen;
    return c;
  }
  FwdCase paged(int ps, KVLayout l, bool use_csr) const {
    FwdCase c = *this;
    c.mode = KvMode::kPaged;
    c.page_size = ps;
    c.layout = l;
    c.csr = use_csr;
    return c;
  }
  FwdCase causal() const {
    FwdCase c = *this;
    c.opts.causal = true;
    return c;
  }
  FwdCase window(int l, int r) const {
    FwdCase c = *this;
    c.opts.window = {l, r};
    return c;
  }
  FwdCase softcap(float s) const {
    FwdCase c = *this;
    c.opts.softcap = s;
    return c;
  }
  FwdCase with_sinks() const {
    FwdCase c = *this;
    c.sinks = true;
    return c;
  }
  FwdCase with_padding() const {
    FwdCase c = *this;
    c.padded = true;
    return c;
  }
  FwdCase fp16() const {
    FwdCase c = *this;
    c.dtype = DType::kFP16;
    return c;
  }
};

void PrintTo(const FwdCase& c, std::ostream* os) { *os << c.name; }

// Host inputs and outputs of one case (the outputs hold the reference's result).
struct FwdProblem {
  std::vector<int32_t> q_lens, kv_lens;
  TestTensor q, k, v, out, lse;
  TestTensor cu_q, cu_k, kv_lens_t, block_table, indptr, indices, sinks;
};

std::vector<int32_t> prefix_sums(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu{0};
  for (int32_t n : lens) cu.push_back(cu.back() + n);
  return cu;
}

FwdProblem build(const FwdCase& c, std::mt19937_64& rng) {
  FwdProblem p;
  const bool ragged = c.mode != KvMode::kDense;
  std::uniform_int_distribution<int> q_dist(1, std::max(c.q_len, 1));
  std::uniform_int_distribution<int> kv_dist(0, c.kv_len);
  for (int b = 0; b < c.batch; ++b) {
    // Request 0 always has the full lengths, so the longest shapes are covered.
    p.q_lens.push_back(ragged && b > 0 ? q_dist(rng) : c.q_len);
    p.kv_lens.push_back(ragged && b > 0 ? kv_dist(rng) : c.kv_len);
  }
  const int64_t total_q = std::accumulate(p.q_lens.begin(), p.q_lens.end(), int64_t{0});
  const int64_t total_kv = std::accumulate(p.kv_lens.begin(), p.kv_lens.end(), int64_t{0});
  const int64_t pad = c.padded ? 8 : 0;

  auto rows = [&](int64_t heads, int64_t dim) -> std::vector<int64_t> {
    if (ragged) return {total_q, heads, dim};
    return {c.batch, c.q_len, heads, dim};
  };
  p.q = padded_tensor(c.dtype, rows(c.hq, c.d), pad);
  p.out = padded_tensor(c.dtype, rows(c.hq, c.dv), pad);
  p.lse =
      TestTensor(HostTensor(DType::kFP32, ragged ? std::vector<int64_t>{total_q, c.hq}
                                                 : std::vector<int64_t>{c.batch, c.q_len, c.hq}));
  fill_uniform(p.q.view, rng, -2.0, 2.0);
  if (ragged) p.cu_q = TestTensor(int_tensor(prefix_sums(p.q_lens)));

  if (c.mode == KvMode::kPaged) {
    PagePlan plan = PagePlan::fresh(p.kv_lens, c.page_size);
    plan.shuffle(rng);
    auto pool_shape = [&](int64_t dim) -> std::vector<int64_t> {
      if (c.layout == KVLayout::kNHD) return {plan.num_pages, c.page_size, c.hkv, dim};
      return {plan.num_pages, c.hkv, c.page_size, dim};
    };
    // Every slot starts as NaN; only the slots below each request's length get data.
    p.k = padded_tensor(c.dtype, pool_shape(c.d), pad);
    p.v = padded_tensor(c.dtype, pool_shape(c.dv), pad);
    std::uniform_real_distribution<double> k_dist(-2.0, 2.0), v_dist(-1.0, 1.0);
    for (int b = 0; b < c.batch; ++b) {
      for (int64_t t = 0; t < p.kv_lens[b]; ++t) {
        for (int64_t h = 0; h < c.hkv; ++h) {
          const int64_t page = plan.page(b, t), slot = t % c.page_size;
          for (int64_t d = 0; d < c.d; ++d) {
            store_element(p.k.view, pool_offset(p.k.view, c.layout, page, slot, h, d), k_dist(rng));
          }
          for (int64_t d = 0; d < c.dv; ++d) {
            store_element(p.v.view, pool_offset(p.v.view, c.layout, page, slot, h, d), v_dist(rng));
          }
        }
      }
    }
    p.kv_lens_t = TestTensor(int_tensor(p.kv_lens));
    if (c.csr) {
      p.indptr = TestTensor(plan.csr_indptr());
      p.indices = TestTensor(plan.csr_indices());
    } else {
      p.block_table = TestTensor(plan.block_table());
    }
  } else {
    auto kv_shape = [&](int64_t dim) -> std::vector<int64_t> {
      if (c.mode == KvMode::kVarlen) return {total_kv, c.hkv, dim};
      return {c.batch, c.kv_len, c.hkv, dim};
    };
    p.k = padded_tensor(c.dtype, kv_shape(c.d), pad);
    p.v = padded_tensor(c.dtype, kv_shape(c.dv), pad);
    fill_uniform(p.k.view, rng, -2.0, 2.0);
    fill_uniform(p.v.view, rng, -1.0, 1.0);
    if (c.mode == KvMode::kVarlen) p.cu_k = TestTensor(int_tensor(prefix_sums(p.kv_lens)));
  }
  if (c.sinks) {
    p.sinks = TestTensor(HostTensor(DType::kFP32, {c.hq}));
    fill_uniform(p.sinks.view, rng, -1.0, 3.0);
  }
  return p;
}

// The arguments over either the host tensors or their device mirrors (`view` picks).
FwdArgs args_of(const FwdCase& c, const FwdProblem& p,
                const std::function<TensorView(const TestTensor&)>& view) {
  FwdArgs a;
  a.q = view(p.q);
  a.k = view(p.k);
  a.v = view(p.v);
  a.cu_seqlens_q = view(p.cu_q);
  a.cu_seqlens_k = view(p.cu_k);
  a.max_seqlen_q = *std::max_element(p.q_lens.begin(), p.q_lens.end());
  a.max_seqlen_k = *std::max_element(p.kv_lens.begin(), p.kv_lens.end());
  a.pages.block_table = view(p.block_table);
  a.pages.indptr = view(p.indptr);
  a.pages.indices = view(p.indices);
  a.pages.kv_lens = view(p.kv_lens_t);
  a.pages.layout = c.layout;
  a.sinks = view(p.sinks);
  a.out = view(p.out);
  a.lse = view(p.lse);
  return a;
}

class NaiveFwd : public GpuTestWithParam<FwdCase> {};

TEST_P(NaiveFwd, MatchesReference) {
  const FwdCase& c = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  FwdProblem p = build(c, rng);

  const FwdArgs host = args_of(c, p, [](const TestTensor& t) { return t.view; });
  p.out.storage.fill_bytes(0xff);
  p.lse.storage.fill_bytes(0xff);
  try {
    reference::attention_fwd(host, c.opts);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotImplemented) {
      GTEST_SKIP() << "CPU reference not implemented yet: " << e.what();
    }
    throw;
  }

  DeviceSet dev;
  const FwdArgs gpu = args_of(c, p, [&](const TestTensor& t) { return dev.put(t); });
  dev.poison(p.out.storage);
  dev.poison(p.lse.storage);
  ::hopattn::naive::naive_attention_fwd(gpu, c.opts, nullptr);
  check_cuda(cudaDeviceSynchronize(), "naive_attention_fwd");
  TestTensor got_out = same_layout(p.out), got_lse = same_layout(p.lse);
  dev.download(p.out.storage, got_out.storage);
  dev.download(p.lse.storage, got_lse.storage);

  const Comparison out = compare_output(got_out.view, p.out.view);
  const Comparison lse = compare_lse(got_lse.view, p.lse.view);
  std::printf("[ %s ] seed %llu\n  out: %s\n  lse: %s\n", c.name.c_str(),
              static_cast<unsigned long long>(seed), out.summary().c_str(), lse.summary().c_str());
  EXPECT_EQ(out.failures, 0) << out.summary();
  // Independent roundings of values a few fp32 ulps apart rarely differ (~0.05% of bf16
  // elements, ~0.5% of fp16); a wrong rounding mode or a systematic bias flips about half.
  EXPECT_LE(out.differing_fraction(), 0.05) << out.summary();
  EXPECT_EQ(lse.failures, 0) << lse.summary();
}

constexpr KVLayout kNHD = KVLayout::kNHD;
constexpr KVLayout kHND = KVLayout::kHND;

std::vector<FwdCase> fwd_cases() {
  return {
      FwdCase("b1_q1_kv1"),
      FwdCase("b1_q1_kv113_gqa5_causal").shape(1, 1, 113).heads(5, 1).causal(),
      FwdCase("b1_q239_kv113_gqa8_causal_d64").shape(1, 239, 113).heads(8, 1).dims(64, 64).causal(),
      FwdCase("b1_q239_kv0").shape(1, 239, 0).dims(64, 64),
      FwdCase("b17_q1_kv113_gqa5").shape(17, 1, 113).heads(10, 2),
      FwdCase("b17_q239_kv1_causal_d64").shape(17, 239, 1).dims(64, 64).causal(),
      FwdCase("b1_q239_kv239_gqa8_d256_window")
          .shape(1, 239, 239)
          .heads(8, 1)
          .dims(256, 256)
          .causal()
          .window(32, 0),
      FwdCase("b1_q113_kv239_gqa5_softcap_sinks")
          .shape(1, 113, 239)
          .heads(5, 1)
          .softcap(2.f)
          .with_sinks(),
      FwdCase("b1_q64_kv113_fp16_d192_dv128_window")
          .shape(1, 64, 113)
          .heads(4, 2)
          .dims(192, 128)
          .fp16()
          .window(16, 16),
      FwdCase("b2_q113_kv113_padded_causal").shape(2, 113, 113).heads(4, 1).with_padding().causal(),
      FwdCase("varlen_b17_q239_kv113_gqa5_causal")
          .shape(17, 239, 113)
          .heads(5, 1)
          .dims(64, 64)
          .varlen()
          .causal(),
      FwdCase("varlen_b17_q239_kv0_gqa8").shape(17, 239, 0).heads(8, 1).dims(64, 64).varlen(),
      FwdCase("varlen_b17_q113_kv239_sinks_window")
          .shape(17, 113, 239)
          .varlen()
          .with_sinks()
          .window(64, -1),
      FwdCase("varlen_b17_q1_kv113_fp16_padded")
          .shape(17, 1, 113)
          .heads(5, 1)
          .varlen()
          .fp16()
          .with_padding(),
      FwdCase("paged1_nhd_bt_b17_q239_kv113_gqa8_causal")
          .shape(17, 239, 113)
          .heads(8, 1)
          .dims(64, 64)
          .paged(1, kNHD, false)
          .causal(),
      FwdCase("paged16_hnd_csr_b17_q113_kv113_gqa5_causal")
          .shape(17, 113, 113)
          .heads(5, 1)
          .paged(16, kHND, true)
          .causal(),
      FwdCase("paged64_nhd_csr_b3_q239_kv239_softcap_window")
          .shape(3, 239, 239)
          .paged(64, kNHD, true)
          .softcap(2.f)
          .window(100, 8),
      FwdCase("paged16_nhd_bt_b1_q239_kv113_causal")
          .shape(1, 239, 113)
          .heads(8, 1)
          .paged(16, kNHD, false)
          .causal(),
      FwdCase("paged64_hnd_bt_b17_q1_kv113_gqa5_sinks")
          .shape(17, 1, 113)
          .heads(5, 1)
          .paged(64, kHND, false)
          .with_sinks(),
      FwdCase("paged16_hnd_bt_b17_kv0").shape(17, 1, 0).paged(16, kHND, false),
  };
}

INSTANTIATE_TEST_SUITE_P(Grid, NaiveFwd, ::testing::ValuesIn(fwd_cases()),
                         [](const ::testing::TestParamInfo<FwdCase>& info) {
                           return info.param.name;
                         });

// Host tensors are refused before any CUDA call, so this runs (and must pass) without a GPU.
TEST(NaiveFwdArgs, RejectsHostTensors) {
  HostTensor q(DType::kBF16, {1, 1, 1, 64}), k(DType::kBF16, {1, 1, 1, 64});
  HostTensor out(DType::kBF16, {1, 1, 1, 64}), lse(DType::kFP32, {1, 1, 1});
  FwdArgs a;
  a.q = q;
  a.k = k;
  a.v = k;
  a.out = out;
  a.lse = lse;
  try {
    ::hopattn::naive::naive_attention_fwd(a, {}, nullptr);
    FAIL() << "expected hopattn::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kType) << e.what();
  }
}

}  // namespace
}  // namespace hopattn::testing
