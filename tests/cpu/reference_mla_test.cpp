// reference::mla against the naive MLA of mla_case.hpp (the textbook softmax over the 576-feature
// concatenations), on paged latent caches built by the test's own address math.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "mla_case.hpp"
#include "naive_attention.hpp"
#include "reference/reference.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {
namespace {

using mla_case::MlaCase;

MlaCase make_case(std::vector<int> q_lens, std::vector<int> kv_lens, int heads, int page_size,
                  bool csr = false) {
  MlaCase c;
  c.q_lens = std::move(q_lens);
  c.kv_lens = std::move(kv_lens);
  c.heads = heads;
  c.page_size = page_size;
  c.csr = csr;
  return c;
}

void run_case(const MlaCase& c, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << "page " << c.page_size << " csr " << c.csr << " causal "
                                    << c.causal << " heads " << c.heads << " pad " << c.pad);
  const auto r = mla_case::build(c, rng);
  reference::mla(r->args, r->opts);
  std::vector<double> got_out, want_out, got_lse, want_lse;
  mla_case::read_outputs(*r, got_out, got_lse);
  mla_case::naive_outputs(*r, want_out, want_lse);
  EXPECT_TRUE(naive::all_close(got_out, want_out, c.q_dtype, "out"));
  EXPECT_TRUE(naive::all_close(got_lse, want_lse, DType::kFP32, "lse"));
  size_t nonzero = 0;
  for (double x : got_out) nonzero += x != 0.0;
  EXPECT_GT(nonzero, got_out.size() / 4) << "too few nonzero outputs for a meaningful check";
}

TEST(MlaReference, DecodeBatchMatchesNaive) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  run_case(make_case({1, 1, 1, 1, 1}, {113, 0, 1, 57, 64}, 8, 64), rng);
  run_case(make_case({1, 1, 1}, {113, 1, 30}, 16, 13, /*csr=*/true), rng);
}

TEST(MlaReference, SeveralQueriesCausalMatchesNaive) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  MlaCase c = make_case({4, 1, 7, 0, 2}, {113, 1, 7, 5, 2}, 4, 13, /*csr=*/true);
  c.q_dtype = DType::kFP32;
  run_case(c, rng);
  // One request: the reference shares its rows among threads rather than its requests.
  run_case(make_case({9}, {113}, 8, 16), rng);
  MlaCase s = make_case({16, 3}, {20, 113}, 4, 16);
  s.scale = 0.07f;
  s.pad = 3;
  s.kv_dtype = DType::kFP16;
  run_case(s, rng);
}

TEST(MlaReference, NonCausalMatchesNaive) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  MlaCase c = make_case({3, 5, 2}, {0, 113, 40}, 4, 1);
  c.causal = false;
  run_case(c, rng);
  MlaCase d = make_case({6, 2}, {3, 70}, 4, 7, /*csr=*/true);
  d.causal = false;
  d.q_dtype = DType::kFP16;
  run_case(d, rng);
}

// An fp8 e4m3 cache (stored values up to 8) with kv_scale 1/8: the reference dequantizes
// (real = stored * kv_scale) before the same math.
TEST(MlaReference, Fp8CacheWithScaleMatchesNaive) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  MlaCase c = make_case({1, 3, 1}, {113, 40, 0}, 4, 16);
  c.kv_dtype = DType::kFP8E4M3;
  c.kv_scale = 0.125f;
  run_case(c, rng);
  MlaCase d = make_case({2, 1}, {9, 70}, 4, 1, /*csr=*/true);
  d.kv_dtype = DType::kFP8E4M3;
  d.kv_scale = 0.25f;
  d.causal = false;
  run_case(d, rng);
}

}  // namespace
}  // namespace hopattn::testing
