// The bwd reference against independent checks: central finite differences (of the double core,
// and coarser ones through the fp32 tensor interface), the naive matrix gradients
// (naive_fwd_bwd.hpp), and layout invariances (GQA, paged, shared pages, strided).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fwd_bwd_problem.hpp"
#include "reference/attention_core.hpp"
#include "reference/reference.hpp"

namespace hopattn::testing::fwd_bwd {
namespace {

struct Grads {
  std::vector<textbook::Backward> requests;
  std::vector<textbook::Forward> saved;  // the out and lse the backward was handed, as stored
  std::vector<double> dsinks;
};

// Forward then backward through the reference on `p` laid out as `build`.
Grads run_reference(const Problem& p, const AttentionOptions& opts, const BuildOptions& build,
                    std::vector<double>* dk_pool = nullptr,
                    std::vector<double>* dv_pool = nullptr) {
  Bundle t(p, build);
  reference::attention_fwd(t.fwd, opts);
  reference::attention_bwd(t.bwd, opts);
  Grads g;
  for (int64_t b = 0; b < t.batch(); ++b) {
    g.requests.push_back(t.read_backward(b));
    g.saved.push_back(t.read_forward(b));
  }
  g.dsinks = t.read_dsinks();
  if (dk_pool) *dk_pool = Bundle::read_all4(t.bwd.dk);
  if (dv_pool) *dv_pool = Bundle::read_all4(t.bwd.dv);
  return g;
}

::testing::AssertionResult matches_naive(const Problem& p, const AttentionOptions& ref_opts,
                                         const AttentionOptions& naive_opts, Layout layout) {
  const Grads got = run_reference(p, ref_opts, {layout});
  const textbook::Config cfg = naive_config(p.spec, naive_opts);
  std::vector<double> dsinks(p.sinks.empty() ? 0 : p.spec.hq, 0.0);
  for (size_t b = 0; b < p.requests.size(); ++b) {
    const std::string req = " of request " + std::to_string(b);
    const DType dt = p.spec.dtype;
    // The statistics the backward read are the forward's, independently: then the gradients.
    const textbook::Forward fwd = textbook::forward(cfg, p.requests[b], p.sinks);
    auto r_out = textbook::close_in_dtype(got.saved[b].out, fwd.out, dt, "out" + req);
    if (!r_out) return r_out;
    auto r_lse = textbook::close_in_dtype(got.saved[b].lse, fwd.lse, DType::kFP32, "lse" + req);
    if (!r_lse) return r_lse;
    const textbook::Backward want = textbook::backward(cfg, p.requests[b], p.sinks, &got.saved[b]);
    for (size_t h = 0; h < dsinks.size(); ++h) dsinks[h] += want.dsinks[h];
    for (auto [got_g, want_g, name] : {std::make_tuple(&got.requests[b].dq, &want.dq, "dq"),
                                       std::make_tuple(&got.requests[b].dk, &want.dk, "dk"),
                                       std::make_tuple(&got.requests[b].dv, &want.dv, "dv")}) {
      auto r = textbook::close_in_dtype(*got_g, *want_g, dt, name + req);
      if (!r) return r;
    }
  }
  return textbook::close_in_dtype(got.dsinks, dsinks, DType::kFP32, "dsinks");
}

TEST(ReferenceBwd, MatchesNaive) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const DType bf16 = DType::kBF16, fp16 = DType::kFP16, fp32 = DType::kFP32;
  struct Case {
    Spec s;
    AttentionOptions o;
    Layout layout;
  };
  const std::vector<Case> cases = {
      {spec(2, 2, 64, 64, {64, 64}, {64, 64}), options(false), Layout::kDense},
      {spec(5, 1, 64, 64, {239}, {113}, fp32, true), options(true), Layout::kDense},
      {spec(8, 1, 64, 64, {1}, {113}, fp16), options(true, {}, 1.5f), Layout::kDense},
      {spec(2, 2, 192, 128, {37, 37}, {61, 61}, bf16, true), options(false, {17, 5}),
       Layout::kDense},
      {spec(3, 1, 64, 64, {7, 7}, {0, 0}, bf16, true), options(true), Layout::kDense},
      {spec(2, 1, 16, 16, ragged(rng, 17, 30), ragged(rng, 17, 40)), options(true),
       Layout::kVarlen},
      {spec(5, 1, 16, 8, ragged(rng, 17, 30), ragged(rng, 17, 40), fp32, true),
       options(false, {6, 2}, 1.f, 0.4f), Layout::kVarlen},
      {spec(8, 1, 32, 32, ragged(rng, 17, 20), ragged(rng, 17, 20), fp16, true),
       options(true, {9, -1}, 2.f), Layout::kVarlen},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("hq " + std::to_string(c.s.hq) + " hkv " + std::to_string(c.s.hkv) + " d " +
                 std::to_string(c.s.dqk) + "/" + std::to_string(c.s.dv) + " " +
                 dtype_name(c.s.dtype) + (c.o.causal ? " causal" : "") + " softcap " +
                 std::to_string(c.o.softcap) + (c.s.sinks ? " sinks" : ""));
    EXPECT_TRUE(matches_naive(make_problem(c.s, rng), c.o, c.o, c.layout));
  }
}

// The gradient comparison must notice a slightly wrong option (each would be a wrong gradient).
TEST(ReferenceBwd, ComparisonDetectsWrongOptions) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  Spec s = spec(4, 2, 16, 16, {30, 11}, {40, 11}, DType::kFP32, true);
  s.q_range = 3.0;
  const Problem p = make_problem(s, rng);
  const AttentionOptions right = options(false, {12, 3}, 1.5f);
  ASSERT_TRUE(matches_naive(p, right, right, Layout::kVarlen));
  auto wrong = [&](auto mutate) {
    AttentionOptions o = right;
    mutate(o);
    return o;
  };
  EXPECT_FALSE(matches_naive(p, right, wrong([](auto& o) { o.causal = true; }), Layout::kVarlen));
  EXPECT_FALSE(
      matches_naive(p, right, wrong([](auto& o) { o.window.left -= 1; }), Layout::kVarlen));
  EXPECT_FALSE(
      matches_naive(p, right, wrong([](auto& o) { o.window.right += 1; }), Layout::kVarlen));
  EXPECT_FALSE(
      matches_naive(p, right, wrong([](auto& o) { o.softcap *= 1.02f; }), Layout::kVarlen));
  EXPECT_FALSE(matches_naive(p, right, wrong([](auto& o) { o.scale = 0.251f; }), Layout::kVarlen));
  // Sinks: the naive gradients without them (empty list = none), from a forward without them.
  const Grads got = run_reference(p, right, {Layout::kVarlen});
  const textbook::Config no_sinks = naive_config(s, right);
  const textbook::Forward plain = textbook::forward(no_sinks, p.requests[0], {});
  const auto want = textbook::backward(no_sinks, p.requests[0], {}, &plain);
  EXPECT_FALSE(textbook::close_in_dtype(got.requests[0].dq, want.dq, s.dtype, "dq"));
}

// ---------------------------------------------------------------- finite differences

// Central differences of L = sum(out * dout) over the double core, for every input.
struct CoreCase {
  std::string name;
  reference::HeadShape shape;
  reference::LogitParams params;
  bool sink;
};

TEST(ReferenceBwd, CoreMatchesFiniteDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  using reference::HeadShape;
  using reference::LogitParams;
  const std::vector<CoreCase> cases = {
      {"plain", HeadShape{5, 7, 6, 4}, LogitParams{0.4, 0, false, {}}, false},
      {"causal q > kv, sink", HeadShape{9, 4, 5, 3}, LogitParams{0.6, 0, true, {}}, true},
      {"window softcap sink", HeadShape{6, 9, 4, 5}, LogitParams{0.8, 1.2, false, {2, 1}}, true},
      {"causal window softcap", HeadShape{8, 8, 3, 3}, LogitParams{0.7, 0.8, true, {3, -1}}, false},
  };
  for (const CoreCase& c : cases) {
    SCOPED_TRACE(c.name);
    const HeadShape& sh = c.shape;
    std::uniform_real_distribution<double> dist(-1.5, 1.5);
    auto rand = [&](int64_t n) {
      std::vector<double> x(n);
      for (double& e : x) e = dist(rng);
      return x;
    };
    std::vector<double> q = rand(sh.q_len * sh.dqk), k = rand(sh.kv_len * sh.dqk),
                        v = rand(sh.kv_len * sh.dv), dout = rand(sh.q_len * sh.dv), sink = rand(1);
    const double* sink_ptr = c.sink ? sink.data() : nullptr;
    auto loss = [&] {
      std::vector<double> out(sh.q_len * sh.dv), lse(sh.q_len);
      reference::head_forward(sh, c.params, q.data(), k.data(), v.data(), sink_ptr, out.data(),
                              lse.data());
      double l = 0;
      for (size_t i = 0; i < out.size(); ++i) l += out[i] * dout[i];
      return l;
    };
    std::vector<double> dq(q.size(), 7.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
    double dsink = 0.0;
    std::vector<double> out(sh.q_len * sh.dv), lse(sh.q_len);
    reference::head_forward(sh, c.params, q.data(), k.data(), v.data(), sink_ptr, out.data(),
                            lse.data());
    reference::head_backward(sh, c.params, q.data(), k.data(), v.data(), sink_ptr, dout.data(),
                             out.data(), lse.data(), dq.data(), dk.data(), dv.data(), &dsink);
    // h = 1e-5: truncation ~h^2 and cancellation ~1e-16 / h are both far below the tolerance.
    const double h = 1e-5;
    auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* what) {
      for (size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + h;
        const double up = loss();
        x[i] = saved - h;
        const double down = loss();
        x[i] = saved;
        const double fd = (up - down) / (2 * h);
        EXPECT_NEAR(grad[i], fd, 1e-7 * (1 + std::fabs(fd))) << what << "[" << i << "]";
      }
    };
    check(q, dq, "dq");
    check(k, dk, "dk");
    check(v, dv, "dv");
    if (c.sink) check(sink, {dsink}, "dsink");
  }
}

// The same through the public reference functions on fp32 tensors (GQA, varlen, sinks). fp32
// storage of the perturbed inputs and of out limits the precision: with h = 2^-6 the error is
// ~1e-4 (truncation h^2 and rounding 1e-7 / h), so the bound is 2e-3 absolute + 1e-2 relative.
TEST(ReferenceBwd, Fp32FiniteDifferencesThroughReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const Spec s = spec(4, 2, 8, 6, {6, 3}, {9, 4}, DType::kFP32, true);
  const Problem p = make_problem(s, rng);
  const AttentionOptions o = options(true, {5, -1}, 2.f);
  Bundle t(p, {Layout::kVarlen});
  reference::attention_fwd(t.fwd, o);
  reference::attention_bwd(t.bwd, o);
  auto loss = [&] {
    reference::attention_fwd(t.fwd, o);
    double l = 0;
    for (int64_t b = 0; b < t.batch(); ++b) {
      const auto f = t.read_forward(b);
      for (size_t i = 0; i < f.out.size(); ++i) l += f.out[i] * p.requests[b].dout[i];
    }
    return l;
  };
  const double h = std::ldexp(1.0, -6);
  auto check = [&](const TensorView& x, int64_t off, double grad, const std::string& what) {
    const double saved = load_element(x, off);
    store_element(x, off, saved + h);
    const double up = loss();
    store_element(x, off, saved - h);
    const double down = loss();
    store_element(x, off, saved);
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(grad, fd, 2e-3 + 1e-2 * std::fabs(fd)) << what;
  };
  for (int64_t b = 0; b < t.batch(); ++b) {
    const textbook::Backward g = t.read_backward(b);
    for (int64_t i = 0; i < s.q_lens[b]; ++i) {
      for (int64_t hd = 0; hd < s.hq; ++hd) {
        for (int64_t d = 0; d < s.dqk; ++d) {
          check(t.fwd.q, t.q_off(t.fwd.q, b, i, hd, d), g.dq[(i * s.hq + hd) * s.dqk + d], "dq");
        }
      }
    }
    for (int64_t j = 0; j < s.kv_lens[b]; ++j) {
      for (int64_t hd = 0; hd < s.hkv; ++hd) {
        for (int64_t d = 0; d < s.dqk; ++d) {
          check(t.fwd.k, t.kv_off(t.fwd.k, b, j, hd, d), g.dk[(j * s.hkv + hd) * s.dqk + d], "dk");
        }
        for (int64_t d = 0; d < s.dv; ++d) {
          check(t.fwd.v, t.kv_off(t.fwd.v, b, j, hd, d), g.dv[(j * s.hkv + hd) * s.dv + d], "dv");
        }
      }
    }
  }
  const auto dsinks = t.read_dsinks();
  for (int64_t hd = 0; hd < s.hq; ++hd) {
    check(t.fwd.sinks, t.fwd.sinks.offset({hd}), dsinks[hd], "dsinks");
  }
}

// ---------------------------------------------------------------- layouts

// |got - want| within fp32 rounding of the terms that were summed (`magnitude`).
::testing::AssertionResult sum_close(const std::vector<double>& got,
                                     const std::vector<double>& want,
                                     const std::vector<double>& magnitude,
                                     const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-6 * magnitude[i] + 1e-12)) {
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << got[i] << ", want " << want[i];
    }
  }
  return got.size() == want.size() ? ::testing::AssertionSuccess()
                                   : ::testing::AssertionFailure() << what << ": sizes differ";
}

TEST(ReferenceBwd, GqaEqualsSumOverMhaExpansion) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{10, 2}, {8, 1}}) {
    SCOPED_TRACE("hq " + std::to_string(hq) + " hkv " + std::to_string(hkv));
    const Spec s = spec(hq, hkv, 16, 24, {20, 7}, {31, 40}, DType::kFP32, true);
    const Problem p = make_problem(s, rng);
    const AttentionOptions o = options(true, {}, 3.f);
    const Grads gqa = run_reference(p, o, {Layout::kVarlen});
    const Grads mha = run_reference(expand_to_mha(p), o, {Layout::kVarlen});
    EXPECT_TRUE(textbook::identical(gqa.dsinks, mha.dsinks, "dsinks"));
    const int64_t group = hq / hkv;
    for (size_t b = 0; b < gqa.requests.size(); ++b) {
      EXPECT_TRUE(textbook::identical(gqa.requests[b].dq, mha.requests[b].dq, "dq"));
      for (auto [dim, got, all] :
           {std::make_tuple(s.dqk, &gqa.requests[b].dk, &mha.requests[b].dk),
            std::make_tuple(s.dv, &gqa.requests[b].dv, &mha.requests[b].dv)}) {
        std::vector<double> want(got->size(), 0.0), magnitude(got->size(), 0.0);
        for (int64_t j = 0; j < s.kv_lens[b]; ++j) {
          for (int64_t h = 0; h < hq; ++h) {
            for (int64_t d = 0; d < dim; ++d) {
              const double x = (*all)[(j * hq + h) * dim + d];
              want[(j * hkv + h / group) * dim + d] += x;
              magnitude[(j * hkv + h / group) * dim + d] += std::fabs(x);
            }
          }
        }
        EXPECT_TRUE(sum_close(*got, want, magnitude, dim == s.dqk ? "dk" : "dv"));
      }
    }
  }
}

TEST(ReferenceBwd, PagedEqualsContiguous) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (int64_t page_size : {1, 3, 16, 64}) {
    Spec s = spec(4, 2, 16, 8, {}, {}, DType::kBF16, true);
    s.kv_lens = ragged(rng, 4, 70);
    s.kv_lens[2] = page_size;  // exactly one page
    for (int64_t kv : s.kv_lens) s.q_lens.push_back(std::min<int64_t>(kv + 1, 25));
    const Problem p = make_problem(s, rng);
    const AttentionOptions o = options(true, {}, 1.5f);
    const Grads want = run_reference(p, o, {Layout::kVarlen});
    for (KVLayout kv_layout : {KVLayout::kNHD, KVLayout::kHND}) {
      for (bool csr : {false, true}) {
        SCOPED_TRACE("page_size " + std::to_string(page_size) +
                     (kv_layout == KVLayout::kNHD ? " NHD" : " HND") + (csr ? " CSR" : " table"));
        BuildOptions build{Layout::kPaged};
        build.page_size = page_size;
        build.kv_layout = kv_layout;
        build.csr = csr;
        build.page_seed = rng();
        std::vector<double> dk_pool, dv_pool;
        const Grads got = run_reference(p, o, build, &dk_pool, &dv_pool);
        EXPECT_TRUE(textbook::identical(got.dsinks, want.dsinks, "dsinks"));
        for (size_t b = 0; b < want.requests.size(); ++b) {
          EXPECT_TRUE(textbook::identical(got.requests[b].dq, want.requests[b].dq, "dq"));
          EXPECT_TRUE(textbook::identical(got.requests[b].dk, want.requests[b].dk, "dk"));
          EXPECT_TRUE(textbook::identical(got.requests[b].dv, want.requests[b].dv, "dv"));
        }
        // Everything else in the pools (unused pages, slots past kv_len) was zeroed.
        auto total = [](const std::vector<double>& x) {
          double sum = 0;
          for (double e : x) sum += std::fabs(e);
          return sum;
        };
        double used_k = 0, used_v = 0;
        for (const auto& r : got.requests) used_k += total(r.dk), used_v += total(r.dv);
        EXPECT_TRUE(all_finite(dk_pool) && all_finite(dv_pool));
        EXPECT_EQ(total(dk_pool), used_k);
        EXPECT_EQ(total(dv_pool), used_v);
      }
    }
  }
}

TEST(ReferenceBwd, SharedPagesAccumulate) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  // Requests 1 and 2 read request 0's first two pages (a shared prompt prefix).
  const int64_t page_size = 8, shared = 2;
  const Spec s = spec(4, 2, 16, 8, {9, 5, 16}, {30, 20, 16}, DType::kFP32, true);
  Problem p = make_problem(s, rng);
  for (int64_t b : {1, 2}) {
    auto& r = p.requests[b];
    const auto& r0 = p.requests[0];
    std::copy(r0.k.begin(), r0.k.begin() + shared * page_size * s.hkv * s.dqk, r.k.begin());
    std::copy(r0.v.begin(), r0.v.begin() + shared * page_size * s.hkv * s.dv, r.v.begin());
  }
  for (KVLayout kv_layout : {KVLayout::kNHD, KVLayout::kHND}) {
    const AttentionOptions o = options(true, {6, -1});
    const Grads contiguous = run_reference(p, o, {Layout::kVarlen});
    BuildOptions build{Layout::kPaged};
    build.page_size = page_size;
    build.kv_layout = kv_layout;
    build.shared_prefix_pages = shared;
    build.page_seed = rng();
    // The expected pools: every request's contiguous dk/dv added at the slot it reads.
    Bundle t(p, build);
    std::vector<double> want_k(Bundle::read_all4(t.bwd.dk).size(), 0.0), want_v, mag_k, mag_v;
    want_v.assign(Bundle::read_all4(t.bwd.dv).size(), 0.0);
    mag_k = want_k;
    mag_v = want_v;
    // Offsets in the freshly built (contiguous) pools are logical indices.
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t j = 0; j < s.kv_lens[b]; ++j) {
        for (int64_t h = 0; h < s.hkv; ++h) {
          for (int64_t d = 0; d < s.dqk; ++d) {
            const double x = contiguous.requests[b].dk[(j * s.hkv + h) * s.dqk + d];
            want_k[t.kv_off(t.bwd.dk, b, j, h, d)] += x;
            mag_k[t.kv_off(t.bwd.dk, b, j, h, d)] += std::fabs(x);
          }
          for (int64_t d = 0; d < s.dv; ++d) {
            const double x = contiguous.requests[b].dv[(j * s.hkv + h) * s.dv + d];
            want_v[t.kv_off(t.bwd.dv, b, j, h, d)] += x;
            mag_v[t.kv_off(t.bwd.dv, b, j, h, d)] += std::fabs(x);
          }
        }
      }
    }
    reference::attention_fwd(t.fwd, o);
    reference::attention_bwd(t.bwd, o);
    EXPECT_TRUE(sum_close(Bundle::read_all4(t.bwd.dk), want_k, mag_k, "dk pool"));
    EXPECT_TRUE(sum_close(Bundle::read_all4(t.bwd.dv), want_v, mag_v, "dv pool"));
    // The shared pages really were shared: they hold more than request 0's own gradient.
    EXPECT_NE(load_element(t.bwd.dk, t.kv_off(t.bwd.dk, 0, 0, 0, 0)), contiguous.requests[0].dk[0]);
  }
}

TEST(ReferenceBwd, StridedEqualsContiguous) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const AttentionOptions o = options(true, {25, -1}, 2.f);
  for (Layout layout : {Layout::kDense, Layout::kVarlen, Layout::kPaged}) {
    SCOPED_TRACE(static_cast<int>(layout));
    Spec s = spec(6, 2, 24, 40, {29, 29, 29}, {45, 45, 45}, DType::kFP16, true);
    if (layout != Layout::kDense) s.q_lens = {29, 0, 13}, s.kv_lens = {45, 7, 13};
    const Problem p = make_problem(s, rng);
    BuildOptions contiguous{layout}, strided{layout};
    contiguous.page_size = strided.page_size = 5;
    strided.strided = true;
    const Grads want = run_reference(p, o, contiguous);
    const Grads got = run_reference(p, o, strided);
    EXPECT_TRUE(textbook::identical(got.dsinks, want.dsinks, "dsinks"));
    for (size_t b = 0; b < want.requests.size(); ++b) {
      EXPECT_TRUE(textbook::identical(got.requests[b].dq, want.requests[b].dq, "dq"));
      EXPECT_TRUE(textbook::identical(got.requests[b].dk, want.requests[b].dk, "dk"));
      EXPECT_TRUE(textbook::identical(got.requests[b].dv, want.requests[b].dv, "dv"));
    }
  }
}

TEST(ReferenceBwd, EmptyRowsGiveZeroGradients) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  // Request 0 has no keys; request 1's rows 0..2 have their diagonal before key 0.
  const Spec s = spec(3, 1, 16, 16, {4, 6}, {0, 3}, DType::kBF16, true);
  const Problem p = make_problem(s, rng);
  const Grads g = run_reference(p, options(true), {Layout::kVarlen});
  for (double x : g.requests[0].dq) EXPECT_EQ(x, 0.0);
  for (int64_t e = 0; e < 6 * s.hq * s.dqk; ++e) {
    const bool empty_row = e / (s.hq * s.dqk) < 3;
    if (empty_row) {
      EXPECT_EQ(g.requests[1].dq[e], 0.0) << e;
    } else {
      EXPECT_TRUE(std::isfinite(g.requests[1].dq[e])) << e;
    }
  }
  EXPECT_TRUE(all_finite(g.dsinks));
  EXPECT_TRUE(matches_naive(p, options(true), options(true), Layout::kVarlen));
}

}  // namespace
}  // namespace hopattn::testing::fwd_bwd
