// The fwd reference against independent checks: the naive formula (naive_fwd_bwd.hpp), values
// worked out by hand, and layout invariances (paged, strided, GQA) that must not change a bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fwd_bwd_problem.hpp"
#include "reference/reference.hpp"

namespace hopattn::testing::fwd_bwd {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int64_t> uniform(int64_t batch, int64_t len) {
  return std::vector<int64_t>(batch, len);
}

std::string describe(const Spec& s, const AttentionOptions& o, Layout layout) {
  std::string lens;
  for (size_t b = 0; b < s.q_lens.size(); ++b) {
    lens += " " + std::to_string(s.q_lens[b]) + "x" + std::to_string(s.kv_lens[b]);
  }
  return std::string(layout == Layout::kDense ? "dense" : "varlen") + " hq " +
         std::to_string(s.hq) + " hkv " + std::to_string(s.hkv) + " d " + std::to_string(s.dqk) +
         "/" + std::to_string(s.dv) + " " + dtype_name(s.dtype) + (o.causal ? " causal" : "") +
         " window " + std::to_string(o.window.left) + "," + std::to_string(o.window.right) +
         " softcap " + std::to_string(o.softcap) + (s.sinks ? " sinks" : "") + " lens" + lens;
}

// Runs the reference on `p` laid out as `build` and returns each request's out/lse.
std::vector<textbook::Forward> run_reference(const Problem& p, const AttentionOptions& opts,
                                             const BuildOptions& build) {
  Bundle t(p, build);
  reference::attention_fwd(t.fwd, opts);
  std::vector<textbook::Forward> r;
  for (int64_t b = 0; b < t.batch(); ++b) r.push_back(t.read_forward(b));
  return r;
}

::testing::AssertionResult matches_naive(const Problem& p, const AttentionOptions& ref_opts,
                                         const AttentionOptions& naive_opts, Layout layout) {
  const auto got = run_reference(p, ref_opts, {layout});
  const textbook::Config cfg = naive_config(p.spec, naive_opts);
  for (size_t b = 0; b < p.requests.size(); ++b) {
    const textbook::Forward want = textbook::forward(cfg, p.requests[b], p.sinks);
    const std::string req = " of request " + std::to_string(b);
    auto r = textbook::close_in_dtype(got[b].out, want.out, p.spec.dtype, "out" + req);
    if (!r) return r;
    r = textbook::close_in_dtype(got[b].lse, want.lse, DType::kFP32, "lse" + req);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

void expect_matches_naive(const std::vector<std::pair<Spec, AttentionOptions>>& cases,
                          Layout layout, std::mt19937_64& rng) {
  for (const auto& [s, o] : cases) {
    SCOPED_TRACE(describe(s, o, layout));
    const Problem p = make_problem(s, rng);
    EXPECT_TRUE(matches_naive(p, o, o, layout));
  }
}

TEST(ReferenceFwd, MatchesNaiveDense) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const DType bf16 = DType::kBF16, fp16 = DType::kFP16, fp32 = DType::kFP32;
  expect_matches_naive(
      {
          {spec(4, 4, 64, 64, uniform(2, 64), uniform(2, 64)), options(false)},
          {spec(5, 1, 64, 64, uniform(2, 239), uniform(2, 113)), options(true)},
          {spec(8, 1, 64, 64, uniform(1, 1), uniform(1, 113), fp16), options(true, {}, 1.5f)},
          {spec(2, 2, 192, 128, uniform(3, 57), uniform(3, 113), bf16, true),
           options(false, {17, 5})},
          {spec(2, 1, 64, 64, uniform(1, 1), uniform(1, 1), fp32), options(true)},
          {spec(2, 1, 64, 64, uniform(2, 7), uniform(2, 0), bf16, true), options(true)},
          {spec(8, 1, 192, 128, uniform(2, 33), uniform(2, 47), fp32, true),
           options(true, {9, -1}, 2.f, 0.3f)},
          {spec(2, 2, 64, 64, uniform(1, 239), uniform(1, 239)), options(false, {-1, 3})},
          {spec(10, 2, 64, 64, uniform(1, 113), uniform(1, 239), fp16), options(true, {40, -1})},
      },
      Layout::kDense, rng);
}

TEST(ReferenceFwd, MatchesNaiveVarlen) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const DType bf16 = DType::kBF16, fp16 = DType::kFP16, fp32 = DType::kFP32;
  std::vector<std::pair<Spec, AttentionOptions>> cases = {
      {spec(2, 1, 16, 16, ragged(rng, 17, 40), ragged(rng, 17, 60)), options(true)},
      {spec(5, 1, 16, 8, ragged(rng, 17, 40), ragged(rng, 17, 60), fp16, true),
       options(false, {6, 2}, 1.f)},
      {spec(8, 1, 32, 32, ragged(rng, 17, 30), ragged(rng, 17, 30), fp32, true),
       options(true, {}, 0.f, 0.25f)},
      {spec(3, 3, 64, 64, ragged(rng, 17, 30), ragged(rng, 17, 90), bf16), options(true, {20, -1})},
      {spec(4, 2, 64, 64, {239}, {113}, bf16, true), options(true)},
      {spec(2, 2, 192, 128, {1, 0, 50}, {113, 9, 0}, fp16), options(false)},
  };
  expect_matches_naive(cases, Layout::kVarlen, rng);
}

// Every option the grids exercise must matter to the comparison: the reference run with the
// right options must disagree with the naive formula run with a slightly wrong one.
TEST(ReferenceFwd, ComparisonDetectsWrongOptions) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  Spec s = spec(4, 2, 32, 32, {40, 17, 1}, {60, 17, 30}, DType::kBF16, true);
  s.q_range = 3.0;
  const Problem p = make_problem(s, rng);
  const AttentionOptions right = options(false, {12, 3}, 1.5f);
  ASSERT_TRUE(matches_naive(p, right, right, Layout::kVarlen));

  std::vector<std::pair<std::string, AttentionOptions>> wrong;
  auto add = [&](const std::string& name, auto mutate) {
    AttentionOptions o = right;
    mutate(o);
    wrong.emplace_back(name, o);
  };
  add("causal", [](AttentionOptions& o) { o.causal = true; });
  add("window.left", [](AttentionOptions& o) { o.window.left += 1; });
  add("window.right", [](AttentionOptions& o) { o.window.right -= 1; });
  add("softcap", [](AttentionOptions& o) { o.softcap *= 1.05f; });
  add("no softcap", [](AttentionOptions& o) { o.softcap = 0.f; });
  add("scale", [&](AttentionOptions& o) { o.scale = 1.02f / std::sqrt(float(s.dqk)); });
  for (const auto& [name, o] : wrong) {
    EXPECT_FALSE(matches_naive(p, right, o, Layout::kVarlen)) << name;
  }
  // Sinks: the naive formula without them (empty list = none).
  const auto got = run_reference(p, right, {Layout::kVarlen});
  const auto want = textbook::forward(naive_config(s, right), p.requests[0], {});
  EXPECT_FALSE(textbook::close_in_dtype(got[0].lse, want.lse, DType::kFP32, "lse"));
}

TEST(ReferenceFwd, HandComputedValues) {
  // One head, d = 1, q = 1, keys 0, 1, 2 (logits 0, 1, 2 with scale 1), values 1, 2, 4.
  const double e = std::exp(1.0), e2 = std::exp(2.0), sink = 0.5, es = std::exp(sink);
  Spec s = spec(1, 1, 1, 1, {2}, {3}, DType::kFP32, true);
  Problem p{s, {}, {sink}};
  textbook::Request r;
  r.q_len = 2;
  r.kv_len = 3;
  r.q = {1, 1};
  r.k = {0, 1, 2};
  r.v = {1, 2, 4};
  r.dout = {1, 1};
  p.requests.push_back(r);
  // Causal, bottom-right: row 0 sees keys 0..1, row 1 sees 0..2; the sink only in denominators.
  auto f = run_reference(p, options(true, {}, 0.f, 1.f), {Layout::kVarlen})[0];
  EXPECT_NEAR(f.lse[0], std::log(1 + e + es), 1e-6);
  EXPECT_NEAR(f.lse[1], std::log(1 + e + e2 + es), 1e-6);
  EXPECT_NEAR(f.out[0], (1 + 2 * e) / (1 + e + es), 1e-6);
  EXPECT_NEAR(f.out[1], (1 + 2 * e + 4 * e2) / (1 + e + e2 + es), 1e-6);
  // Window (0, 0), not causal: each row sees only its diagonal key; default scale 1/sqrt(1) = 1.
  f = run_reference(p, options(false, {0, 0}), {Layout::kVarlen})[0];
  EXPECT_NEAR(f.lse[0], std::log(e + es), 1e-6);
  EXPECT_NEAR(f.out[1], 4 * e2 / (e2 + es), 1e-6);
  // Softcap 1 and scale 2: logits tanh(0), tanh(2), tanh(4).
  p.sinks.clear();
  p.spec.sinks = false;
  f = run_reference(p, options(false, {}, 1.f, 2.f), {Layout::kVarlen})[0];
  const double a = std::exp(std::tanh(0.0)), b = std::exp(std::tanh(2.0)),
               c = std::exp(std::tanh(4.0));
  EXPECT_NEAR(f.lse[0], std::log(a + b + c), 1e-6);
  EXPECT_NEAR(f.out[0], (a + 2 * b + 4 * c) / (a + b + c), 1e-6);
}

TEST(ReferenceFwd, PagedEqualsContiguous) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (int64_t page_size : {1, 3, 16, 64}) {
    Spec s = spec(4, 2, 32, 16, {}, {}, DType::kBF16, true);
    s.kv_lens = ragged(rng, 5, 150);
    s.kv_lens[2] = 2 * page_size;  // ends exactly on a page boundary
    for (int64_t kv : s.kv_lens) s.q_lens.push_back(std::min<int64_t>(kv + 2, 40));
    const Problem p = make_problem(s, rng);
    const AttentionOptions o = options(true, {30, -1});
    const auto want = run_reference(p, o, {Layout::kVarlen});
    for (KVLayout kv_layout : {KVLayout::kNHD, KVLayout::kHND}) {
      for (bool csr : {false, true}) {
        SCOPED_TRACE("page_size " + std::to_string(page_size) +
                     (kv_layout == KVLayout::kNHD ? " NHD" : " HND") + (csr ? " CSR" : " table"));
        BuildOptions build{Layout::kPaged};
        build.page_size = page_size;
        build.kv_layout = kv_layout;
        build.csr = csr;
        build.page_seed = rng();
        const auto got = run_reference(p, o, build);
        for (size_t b = 0; b < want.size(); ++b) {
          EXPECT_TRUE(textbook::identical(got[b].out, want[b].out, "out"));
          EXPECT_TRUE(textbook::identical(got[b].lse, want[b].lse, "lse"));
        }
      }
    }
  }
}

TEST(ReferenceFwd, GqaEqualsMhaWithRepeatedKv) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{10, 2}, {8, 1}, {6, 3}}) {
    SCOPED_TRACE("hq " + std::to_string(hq) + " hkv " + std::to_string(hkv));
    const Problem p =
        make_problem(spec(hq, hkv, 32, 32, {20, 7}, {31, 40}, DType::kFP16, true), rng);
    const AttentionOptions o = options(true, {}, 3.f);
    const auto gqa = run_reference(p, o, {Layout::kVarlen});
    const auto mha = run_reference(expand_to_mha(p), o, {Layout::kVarlen});
    for (size_t b = 0; b < gqa.size(); ++b) {
      EXPECT_TRUE(textbook::identical(gqa[b].out, mha[b].out, "out"));
      EXPECT_TRUE(textbook::identical(gqa[b].lse, mha[b].lse, "lse"));
    }
  }
}

TEST(ReferenceFwd, StridedEqualsContiguous) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const AttentionOptions o = options(true, {25, -1}, 2.f);
  for (Layout layout : {Layout::kDense, Layout::kVarlen, Layout::kPaged}) {
    SCOPED_TRACE(static_cast<int>(layout));
    Spec s = spec(6, 2, 24, 40, uniform(3, 29), uniform(3, 45), DType::kFP16, true);
    if (layout != Layout::kDense) s.q_lens = {29, 0, 13}, s.kv_lens = {45, 7, 13};
    const Problem p = make_problem(s, rng);
    BuildOptions contiguous{layout}, strided{layout};
    contiguous.page_size = strided.page_size = 5;
    strided.strided = true;
    const auto want = run_reference(p, o, contiguous);
    const auto got = run_reference(p, o, strided);
    for (size_t b = 0; b < want.size(); ++b) {
      EXPECT_TRUE(textbook::identical(got[b].out, want[b].out, "out"));
      EXPECT_TRUE(textbook::identical(got[b].lse, want[b].lse, "lse"));
    }
  }
}

// Rows in `empty` of request b must be exactly out 0, lse `lse` (-inf, or the sink); all other
// rows finite with a finite lse.
void expect_empty_rows(const textbook::Forward& f, const Spec& s, const std::vector<bool>& empty,
                       const std::vector<double>& empty_lse) {
  for (size_t i = 0; i < empty.size(); ++i) {
    for (int64_t h = 0; h < s.hq; ++h) {
      const double lse = f.lse[i * s.hq + h];
      if (empty[i]) {
        EXPECT_EQ(lse, empty_lse[h]) << "row " << i << " head " << h;
      } else {
        EXPECT_TRUE(std::isfinite(lse)) << "row " << i << " head " << h;
      }
      for (int64_t d = 0; d < s.dv; ++d) {
        const double o = f.out[(i * s.hq + h) * s.dv + d];
        if (empty[i]) {
          EXPECT_EQ(o, 0.0) << "row " << i << " head " << h;
        } else {
          EXPECT_TRUE(std::isfinite(o)) << "row " << i << " head " << h;
        }
      }
    }
  }
}

TEST(ReferenceFwd, EmptyKvGivesZeroOutAndNegInfLse) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (Layout layout : {Layout::kVarlen, Layout::kPaged}) {
    const Spec s = spec(4, 2, 16, 16, {3, 2, 1}, {0, 5, 0});
    const Problem p = make_problem(s, rng);
    const auto f = run_reference(p, options(false), {layout});
    expect_empty_rows(f[0], s, {true, true, true}, std::vector<double>(s.hq, -kInf));
    expect_empty_rows(f[1], s, {false, false}, {});
    expect_empty_rows(f[2], s, {true}, std::vector<double>(s.hq, -kInf));
  }
  const Spec dense = spec(2, 1, 16, 16, uniform(2, 4), uniform(2, 0));
  const auto f = run_reference(make_problem(dense, rng), options(true), {Layout::kDense});
  for (const auto& r : f) expect_empty_rows(r, dense, std::vector<bool>(4, true), {-kInf, -kInf});
}

TEST(ReferenceFwd, RowsMaskedByCausalOrWindowAreEmpty) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  // q_len 10 > kv_len 4: row i's diagonal key is i - 6.
  const Spec s = spec(2, 1, 16, 16, {10}, {4});
  const Problem p = make_problem(s, rng);
  const std::vector<double> neg_inf(s.hq, -kInf);
  std::vector<bool> causal_empty(10), window_empty(10);
  for (int i = 0; i < 10; ++i) {
    causal_empty[i] = i - 6 < 0;      // causal: keys 0 .. diag
    window_empty[i] = i - 6 + 2 < 0;  // window (0, 2), not causal: keys diag .. diag + 2
  }
  expect_empty_rows(run_reference(p, options(true), {Layout::kVarlen})[0], s, causal_empty,
                    neg_inf);
  expect_empty_rows(run_reference(p, options(false, {0, 2}), {Layout::kVarlen})[0], s, window_empty,
                    neg_inf);
  // A left-only window never empties a row: its diagonal is at most the last key.
  expect_empty_rows(run_reference(p, options(false, {1, -1}), {Layout::kVarlen})[0], s,
                    std::vector<bool>(10, false), neg_inf);
}

TEST(ReferenceFwd, SinkOnEmptyRowGivesLseEqualToSink) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const Spec s = spec(3, 1, 16, 16, {4, 6}, {0, 3}, DType::kBF16, true);
  const Problem p = make_problem(s, rng);
  const auto f = run_reference(p, options(true), {Layout::kVarlen});
  expect_empty_rows(f[0], s, {true, true, true, true}, p.sinks);
  // kv_len 3, q_len 6: rows 0..2 have their diagonal before key 0.
  expect_empty_rows(f[1], s, {true, true, true, false, false, false}, p.sinks);
}

TEST(ReferenceFwd, NaNPastKvLenDoesNotLeak) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  // Paged: the pool is NaN except for the tokens below kv_len (partial last pages, the unused
  // pages and the block table's padding entries point at NaN).
  Spec s = spec(4, 2, 16, 16, {5, 9, 2}, {7, 21, 3}, DType::kBF16, true);
  const Problem p = make_problem(s, rng);
  BuildOptions paged{Layout::kPaged};
  paged.page_size = 8;
  EXPECT_TRUE(matches_naive(p, options(false), options(false), Layout::kVarlen));
  const auto got = run_reference(p, options(false), paged);
  const textbook::Config cfg = naive_config(s, options(false));
  for (size_t b = 0; b < got.size(); ++b) {
    const auto want = textbook::forward(cfg, p.requests[b], p.sinks);
    EXPECT_TRUE(textbook::close_in_dtype(got[b].out, want.out, s.dtype, "paged out"));
  }
  // Varlen: a request with no queries holds NaN keys and values; its neighbours never see them.
  Spec v = spec(2, 2, 16, 16, {5, 0, 6}, {7, 9, 8});
  const Problem pv = make_problem(v, rng);
  Bundle t(pv, {Layout::kVarlen});
  for (int64_t j = 0; j < 9; ++j) {
    for (int64_t h = 0; h < v.hkv; ++h) {
      for (int64_t d = 0; d < v.dqk; ++d)
        store_element(t.fwd.k, t.kv_off(t.fwd.k, 1, j, h, d), NAN);
      for (int64_t d = 0; d < v.dv; ++d) store_element(t.fwd.v, t.kv_off(t.fwd.v, 1, j, h, d), NAN);
    }
  }
  reference::attention_fwd(t.fwd, options(false));
  const textbook::Config vc = naive_config(v, options(false));
  for (int64_t b : {0, 2}) {
    const auto want = textbook::forward(vc, pv.requests[b], {});
    EXPECT_TRUE(textbook::close_in_dtype(t.read_forward(b).out, want.out, v.dtype, "varlen out"));
  }
}

}  // namespace
}  // namespace hopattn::testing::fwd_bwd
