// reference::decode against the naive decode (tests/cpu/naive_decode.hpp) and against itself
// under transformations that must not change the result (paging, layout, GQA expansion, tree
// masks that spell out causality, beams whose shared prefix is copied).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "decode_case.hpp"
#include "naive_decode.hpp"
#include "reference/reference.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {
namespace {

using namespace decode_case;  // NOLINT: the test-side decode problem builder

struct Result {
  std::vector<double> out, lse;  // logical order [B][L][Hq][D], [B][L][Hq]
};

// Poisons the outputs, runs the reference and reads both outputs back through their views.
Result run_reference(DecodeRun& r) {
  r.out_buf.fill_bytes(0xff);
  r.lse_buf.fill_bytes(0xff);
  reference::decode(r.args, r.opts);
  Result res;
  read_outputs(r, res.out, res.lse);
  return res;
}

void expect_matches_naive(DecodeRun& r, const Result& got) {
  std::vector<double> out, lse;
  naive::decode(naive_problem(r), out, lse);
  EXPECT_TRUE(naive::all_close(got.out, out, r.c.q_dtype, "out"));
  EXPECT_TRUE(naive::all_close(got.lse, lse, DType::kFP32, "lse"));
}

::testing::AssertionResult identical(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Guards the equality tests against passing vacuously (e.g. on all-empty rows).
::testing::AssertionResult mostly_nonzero(const std::vector<double>& a) {
  size_t nonzero = 0;
  for (double x : a) nonzero += std::isfinite(x) && x != 0.0;
  if (nonzero * 2 > a.size()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << nonzero << " of " << a.size() << " nonzero";
}

Result run(DecodeRun& r, std::mt19937_64& rng) {
  assemble(r, rng);
  return run_reference(r);
}

constexpr DType kKVDtypes[] = {DType::kBF16, DType::kFP16, DType::kFP8E4M3, DType::kFP8E5M2,
                               DType::kInt8};

TEST(DecodeReference, MatchesNaiveOverGrid) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const DType q_dtypes[] = {DType::kBF16, DType::kFP16, DType::kFP32};
  int idx = 0;
  for (int group : {1, 5, 8}) {
    for (int q_len : {1, 3, 16}) {
      for (int page_size : {1, 16, 64, 13}) {
        for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
          for (bool csr : {false, true}) {
            DecodeCase c;
            c.group = group;
            c.kv_heads = group == 8 ? 1 : 2;
            c.q_len = q_len;
            c.batch = idx % 2 ? 17 : 1;
            if (c.batch == 17) {
              c.kv_lens.resize(17);
              for (int& n : c.kv_lens) n = std::uniform_int_distribution<int>(2, 70)(rng);
              c.kv_lens[3] = 1;
              c.kv_lens[8] = 0;  // an empty request in the middle of the batch
              c.kv_lens[12] = 113;
            } else {
              c.kv_lens = {(idx / 2) % 3 == 0 ? 1 : 113};
            }
            c.cache.dtype = kKVDtypes[idx % 5];
            c.cache.page_size = page_size;
            c.cache.layout = layout;
            c.cache.csr = csr;
            c.cache.pad = idx % 3 == 0 ? 2 : 0;
            c.q_dtype = q_dtypes[idx % 3];
            c.scale_kind = (idx / 5) % 2 ? ScaleKind::kHead : ScaleKind::kTensor;
            c.causal = idx % 4 != 3;
            if (idx % 7 == 1) c.window = {20, -1};
            if (idx % 7 == 4) c.window = {5, 2};
            c.softcap = idx % 6 == 2 ? 0.8f : 0.f;
            c.sinks = idx % 9 < 3;
            c.tree = idx % 11 == 5;
            c.head_dim = idx % 26 == 0 ? 128 : 32;  // batch 1 only
            c.padded = idx % 3 == 1;
            SCOPED_TRACE(::testing::Message()
                         << "case " << idx << ": group " << group << " q_len " << q_len << " page "
                         << page_size << " layout " << int(layout) << " csr " << csr << " kv "
                         << c.cache.dtype << " q " << c.q_dtype);
            auto r = random_run(c, rng);
            const Result got = run(*r, rng);
            expect_matches_naive(*r, got);
            ++idx;
          }
        }
      }
    }
  }
}

TEST(DecodeReference, EveryKVDtypeAndScaleKind) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (DType dtype : kKVDtypes) {
    for (ScaleKind kind : {ScaleKind::kTensor, ScaleKind::kHead}) {
      for (bool sinks : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype << " per-head " << (kind == ScaleKind::kHead) << " sinks " << sinks);
        DecodeCase c;
        c.batch = 5;
        c.q_len = 3;
        c.kv_heads = 3;
        c.group = 2;
        c.kv_lens = {40, 0, 113, 1, 77};
        c.cache.dtype = dtype;
        c.cache.page_size = 16;
        c.q_dtype = DType::kFP32;  // fp32 out: the comparison is tight (2^-23 relative)
        c.scale_kind = kind;
        c.sinks = sinks;
        auto r = random_run(c, rng);
        const Result got = run(*r, rng);
        expect_matches_naive(*r, got);
        EXPECT_TRUE(mostly_nonzero(got.out));
      }
    }
  }
}

TEST(DecodeReference, OptionsMatchNaive) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  struct Opt {
    bool causal;
    Window window;
    float softcap;
    bool sinks;
    std::optional<float> scale;
  };
  const Opt opts[] = {
      {true, {}, 0.f, false, {}},      {false, {}, 0.f, false, {}},
      {true, {0, -1}, 0.f, false, {}}, {true, {7, -1}, 0.f, true, {}},
      {false, {7, 0}, 0.f, false, {}}, {false, {-1, 3}, 0.f, false, {}},
      {false, {4, 4}, 0.f, true, {}},  {true, {}, 0.5f, false, {}},
      {true, {}, 2.f, true, 0.3f},     {false, {30, 1}, 1.f, true, 1.5f},
  };
  for (const Opt& o : opts) {
    SCOPED_TRACE(::testing::Message()
                 << "causal " << o.causal << " window " << o.window.left << "," << o.window.right
                 << " softcap " << o.softcap << " sinks " << o.sinks);
    DecodeCase c;
    c.batch = 4;
    c.q_len = 5;
    c.kv_heads = 2;
    c.group = 3;
    c.kv_lens = {60, 5, 113, 0};
    c.cache.page_size = 8;
    c.q_dtype = DType::kFP32;
    c.causal = o.causal;
    c.window = o.window;
    c.softcap = o.softcap;
    c.sinks = o.sinks;
    c.scale = o.scale;
    auto r = random_run(c, rng);
    const Result got = run(*r, rng);
    expect_matches_naive(*r, got);
  }
}

// A request with no cache (kv_len 0) next to full ones: zero output, -inf lse, no NaN; with
// sinks its lse is the sink itself.
TEST(DecodeReference, EmptyRequestGivesZeroAndNegInf) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (bool sinks : {false, true}) {
    DecodeCase c;
    c.batch = 3;
    c.q_len = 2;
    c.kv_heads = 1;
    c.group = 4;
    c.kv_lens = {50, 0, 9};
    c.sinks = sinks;
    c.q_dtype = DType::kFP32;
    auto r = random_run(c, rng);
    const Result got = run(*r, rng);
    const int row = 2 * 4 * 32;  // elements of one request's output
    for (int i = row; i < 2 * row; ++i) ASSERT_EQ(got.out[i], 0.0) << i;
    for (int i = 8; i < 16; ++i) {
      if (sinks) {
        EXPECT_EQ(got.lse[i], double(float(r->sinks[i % 4])));
      } else {
        EXPECT_EQ(got.lse[i], -INFINITY);
      }
    }
    EXPECT_TRUE(all_finite(got.out));
    expect_matches_naive(*r, got);
  }
}

TEST(DecodeReference, PagedEqualsContiguousCache) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (DType dtype : {DType::kBF16, DType::kFP8E4M3}) {
    DecodeCase c;
    c.batch = 6;
    c.q_len = 4;
    c.kv_heads = 2;
    c.group = 4;
    c.kv_lens = {113, 17, 64, 1, 90, 33};
    c.cache.dtype = dtype;
    // One page per request, in order: a contiguous [B, S, Hkv, D] cache.
    c.cache.page_size = 113;
    c.cache.shuffle = false;
    c.cache.extra_pages = 0;
    auto contiguous = random_run(c, rng);
    const Result want = run(*contiguous, rng);
    EXPECT_TRUE(mostly_nonzero(want.out));
    for (int page_size : {1, 7, 16, 64}) {
      for (bool csr : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype << " page " << page_size << " csr " << csr);
        auto paged = clone_logical(*contiguous);
        paged->c.cache = CacheSpec{dtype, page_size, KVLayout::kNHD, csr, /*shuffle=*/true, 5};
        const Result got = run(*paged, rng);
        EXPECT_TRUE(identical(got.out, want.out));
        EXPECT_TRUE(identical(got.lse, want.lse));
      }
    }
  }
}

TEST(DecodeReference, HndEqualsNhd) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  DecodeCase c;
  c.batch = 5;
  c.q_len = 2;
  c.kv_heads = 3;
  c.group = 2;
  c.cache.page_size = 16;
  c.cache.dtype = DType::kFP16;
  c.scale_kind = ScaleKind::kHead;
  auto nhd = random_run(c, rng);
  const Result want = run(*nhd, rng);
  EXPECT_TRUE(mostly_nonzero(want.out));
  auto hnd = clone_logical(*nhd);
  hnd->c.cache.layout = KVLayout::kHND;
  hnd->c.cache.pad = 4;
  const Result got = run(*hnd, rng);
  EXPECT_TRUE(identical(got.out, want.out));
  EXPECT_TRUE(identical(got.lse, want.lse));
}

TEST(DecodeReference, StridedViewsEqualContiguous) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  DecodeCase c;
  c.batch = 4;
  c.q_len = 3;
  c.kv_heads = 2;
  c.group = 3;
  c.cache.page_size = 5;
  auto plain = random_run(c, rng);
  const Result want = run(*plain, rng);
  EXPECT_TRUE(mostly_nonzero(want.out));
  auto strided = clone_logical(*plain);
  strided->c.padded = true;
  strided->c.cache.pad = 3;
  const Result got = run(*strided, rng);
  EXPECT_TRUE(identical(got.out, want.out));
  EXPECT_TRUE(identical(got.lse, want.lse));
}

TEST(DecodeReference, GqaEqualsMhaWithRepeatedKVHeads) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (ScaleKind kind : {ScaleKind::kTensor, ScaleKind::kHead}) {
    DecodeCase c;
    c.batch = 3;
    c.q_len = 2;
    c.kv_heads = 2;
    c.group = 5;
    c.cache.dtype = DType::kInt8;
    c.scale_kind = kind;
    c.sinks = true;
    auto gqa = random_run(c, rng);
    const Result want = run(*gqa, rng);
    EXPECT_TRUE(mostly_nonzero(want.out));

    auto mha = clone_logical(*gqa);
    mha->c.kv_heads = 10;
    mha->c.group = 1;
    mha->k_scale.clear();
    mha->v_scale.clear();
    for (int h = 0; h < 10; ++h) {
      mha->k_scale.push_back(gqa->k_scale[h / 5]);
      mha->v_scale.push_back(gqa->v_scale[h / 5]);
    }
    for (int b = 0; b < c.batch; ++b) {
      mha->stored_k[b].clear();
      mha->stored_v[b].clear();
      for (int h = 0; h < 10; ++h) {
        mha->stored_k[b].push_back(gqa->stored_k[b][h / 5]);
        mha->stored_v[b].push_back(gqa->stored_v[b][h / 5]);
      }
    }
    const Result got = run(*mha, rng);
    EXPECT_TRUE(identical(got.out, want.out));
    EXPECT_TRUE(identical(got.lse, want.lse));
  }
}

TEST(DecodeReference, LowerTriangularTreeEqualsCausal) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (Window window : {Window{}, Window{6, -1}}) {
    DecodeCase c;
    c.batch = 4;
    c.q_len = 7;
    c.kv_heads = 2;
    c.group = 2;
    c.kv_lens = {30, 7, 3, 100};
    c.window = window;
    auto causal = random_run(c, rng);
    const Result want = run(*causal, rng);
    EXPECT_TRUE(mostly_nonzero(want.out));

    auto tree = clone_logical(*causal);
    tree->c.tree = true;
    tree->c.causal = false;  // the tree mask replaces the causal rule
    tree->tree.clear();
    for (int b = 0; b < c.batch; ++b) {
      for (int i = 0; i < c.q_len; ++i) {
        for (int t = 0; t < c.q_len; ++t) tree->tree.push_back(t <= i);
      }
    }
    const Result got = run(*tree, rng);
    EXPECT_TRUE(identical(got.out, want.out));
    EXPECT_TRUE(identical(got.lse, want.lse));
  }
}

TEST(DecodeReference, RandomTreeMaskMatchesNaive) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (int q_len : {2, 9, 16}) {
    for (bool causal : {true, false}) {  // ignored where a tree mask is given
      DecodeCase c;
      c.batch = 5;
      c.q_len = q_len;
      c.kv_heads = 2;
      c.group = 3;
      c.kv_lens = {q_len, q_len + 1, 50, 0, 113};
      c.tree = true;
      c.causal = causal;
      c.sinks = q_len == 9;
      c.q_dtype = DType::kFP32;
      if (q_len == 16) c.window = {10, -1};
      auto r = random_run(c, rng);
      const Result got = run(*r, rng);
      expect_matches_naive(*r, got);
      // The tree really matters: a causal decode of the same data differs.
      auto plain = clone_logical(*r);
      plain->c.tree = false;
      plain->c.causal = true;
      const Result causal_got = run(*plain, rng);
      EXPECT_GT(max_abs_diff(got.out, causal_got.out), 1e-3);
    }
  }
}

// Beams: a request's beams read their shared prefix through the first beam's pages. The same
// decode must come out of a cache where every beam holds its own copy of that prefix, and the
// other beams' own prefix pages (filled with different data here) must not matter.
TEST(DecodeReference, BeamsReadSharedPrefixFromFirstBeam) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (int page_size : {16, 5}) {
    for (DType dtype : {DType::kBF16, DType::kFP8E5M2}) {
      SCOPED_TRACE(::testing::Message() << "page " << page_size << " " << dtype);
      DecodeCase c;
      c.batch = 12;
      c.beam_width = 4;
      c.shared_prefix = true;
      c.q_len = 2;
      c.kv_heads = 2;
      c.group = 4;
      c.kv_lens = std::vector<int>(12, 0);
      c.kv_lens[0] = 70;
      c.kv_lens[4] = 33;
      c.kv_lens[8] = 129;
      c.cache.dtype = dtype;
      c.cache.page_size = page_size;
      c.cache.layout = page_size == 5 ? KVLayout::kHND : KVLayout::kNHD;
      c.q_dtype = DType::kFP32;
      auto shared = random_run(c, rng);
      shared->shared[0] = std::max(shared->shared[0], 35);  // a prefix that clearly matters
      const Result got = run(*shared, rng);
      expect_matches_naive(*shared, got);

      auto copied = clone_logical(*shared);
      copied->c.shared_prefix = false;
      for (int b = 0; b < c.batch; ++b) {
        const int first = b - b % c.beam_width;
        for (int h = 0; h < c.kv_heads; ++h) {
          for (int t = 0; t < shared->shared[b / c.beam_width]; ++t) {
            copied->stored_k[b][h][t] = shared->stored_k[first][h][t];
            copied->stored_v[b][h][t] = shared->stored_v[first][h][t];
          }
        }
      }
      const Result want = run(*copied, rng);
      EXPECT_TRUE(identical(got.out, want.out));
      EXPECT_TRUE(identical(got.lse, want.lse));

      // Reading each beam's own prefix pages instead gives a different answer (request 0 shares
      // at least one token), so the check above can tell the two apart.
      auto independent = clone_logical(*shared);
      independent->c.shared_prefix = false;
      const Result own = run(*independent, rng);
      EXPECT_GT(max_abs_diff(own.out, got.out), 1e-3);
    }
  }
}

}  // namespace
}  // namespace hopattn::testing
