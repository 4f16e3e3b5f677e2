// reference::mla against a naive MLA: the query is the concatenation [q_nope, q_pe] and each key
// the concatenation [ckv, kpe] (576 features), the value is ckv, through the textbook softmax of
// naive_attention.hpp. The latent cache is paged by the test's own address math, pages shuffled,
// unused slots poisoned with NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "naive_attention.hpp"
#include "reference/reference.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {
namespace {

constexpr int kLatent = kMlaLatentDim, kRope = kMlaRopeDim;

struct MlaCase {
  std::vector<int> q_lens, kv_lens;
  int heads = 4;
  int page_size = 16;
  bool csr = false;
  bool causal = true;
  DType q_dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  float kv_scale = 1.f;  // real cache value = stored * kv_scale
  std::optional<float> scale;
  int pad = 0;  // extra elements after every row of every tensor (strided views)
};

TensorView padded_view(HostTensor& buf, DType dtype, std::vector<int64_t> shape, int pad) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i] + (i == int(shape.size()) - 1 ? pad : 0);
  }
  return TensorView(buf.data(), dtype, int(shape.size()), shape.data(), strides.data());
}

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
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int batch = int(c.q_lens.size());
  const int total_q = std::accumulate(c.q_lens.begin(), c.q_lens.end(), 0);
  const int H = c.heads, ps = c.page_size;

  // Logical data, rounded to the storage dtypes.
  std::vector<int32_t> cu(1, 0);
  for (int n : c.q_lens) cu.push_back(cu.back() + n);
  HostTensor qn_buf(c.q_dtype, {total_q, H, kLatent + c.pad});
  HostTensor qp_buf(c.q_dtype, {total_q, H, kRope + c.pad});
  const TensorView qn = padded_view(qn_buf, c.q_dtype, {total_q, H, kLatent}, c.pad);
  const TensorView qp = padded_view(qp_buf, c.q_dtype, {total_q, H, kRope}, c.pad);
  std::vector<std::vector<std::vector<double>>> q(total_q, std::vector<std::vector<double>>(H));
  for (int t = 0; t < total_q; ++t) {
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < kLatent + kRope; ++d) {
        const TensorView& dst = d < kLatent ? qn : qp;
        const int64_t off = dst.offset({t, h, d < kLatent ? d : d - kLatent});
        store_element(dst, off, 2.0 * u(rng));
        q[t][h].push_back(load_element(dst, off));
      }
    }
  }

  int num_pages = 2;  // two poisoned pages nobody owns
  int max_pages = 0;
  for (int n : c.kv_lens) {
    num_pages += (n + ps - 1) / ps;
    max_pages = std::max(max_pages, (n + ps - 1) / ps);
  }
  std::vector<int> physical(num_pages);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  HostTensor ckv_buf(c.kv_dtype, {num_pages, ps, kLatent + c.pad});
  HostTensor kpe_buf(c.kv_dtype, {num_pages, ps, kRope + c.pad});
  ckv_buf.fill_bytes(0xff);
  kpe_buf.fill_bytes(0xff);
  const TensorView ckv = padded_view(ckv_buf, c.kv_dtype, {num_pages, ps, kLatent}, c.pad);
  const TensorView kpe = padded_view(kpe_buf, c.kv_dtype, {num_pages, ps, kRope}, c.pad);
  std::vector<int32_t> table(size_t(batch) * std::max(max_pages, 1), physical.back());
  std::vector<int32_t> indptr(1, 0), indices;
  // keys[b][j] = [ckv_j, kpe_j]; values[b][j] = ckv_j.
  std::vector<std::vector<std::vector<double>>> keys(batch), values(batch);
  int next = 0;
  for (int b = 0; b < batch; ++b) {
    std::vector<int> pages;
    for (int i = 0; i < (c.kv_lens[b] + ps - 1) / ps; ++i) {
      pages.push_back(physical[next++]);
      table[size_t(b) * std::max(max_pages, 1) + i] = pages.back();
      indices.push_back(pages.back());
    }
    indptr.push_back(int32_t(indices.size()));
    for (int j = 0; j < c.kv_lens[b]; ++j) {
      std::vector<double> key;
      for (int d = 0; d < kLatent + kRope; ++d) {
        const TensorView& dst = d < kLatent ? ckv : kpe;
        const int64_t off = dst.offset({pages[j / ps], j % ps, d < kLatent ? d : d - kLatent});
        store_element(dst, off, u(rng) / c.kv_scale);
        key.push_back(load_element(dst, off) * c.kv_scale);
      }
      values[b].emplace_back(key.begin(), key.begin() + kLatent);
      keys[b].push_back(std::move(key));
    }
  }

  HostTensor cu_t = int_tensor(cu), lens = int_tensor(c.kv_lens);
  HostTensor table_t = int_tensor(table, {batch, std::max(max_pages, 1)});
  if (indices.empty()) indices.push_back(0);
  HostTensor indptr_t = int_tensor(indptr), indices_t = int_tensor(indices);
  HostTensor out_buf(c.q_dtype, {total_q, H, kLatent + c.pad});
  HostTensor lse_buf(DType::kFP32, {total_q, H + c.pad});
  out_buf.fill_bytes(0xff);
  lse_buf.fill_bytes(0xff);

  MlaArgs args;
  args.q_nope = qn;
  args.q_pe = qp;
  args.ckv = ckv;
  args.kpe = kpe;
  args.kv_scale = c.kv_scale;
  args.cu_seqlens_q = cu_t;
  args.max_seqlen_q = *std::max_element(c.q_lens.begin(), c.q_lens.end());
  args.pages.kv_lens = lens;
  if (c.csr) {
    args.pages.indptr = indptr_t;
    args.pages.indices = indices_t;
  } else {
    args.pages.block_table = table_t;
  }
  args.out = padded_view(out_buf, c.q_dtype, {total_q, H, kLatent}, c.pad);
  args.lse = padded_view(lse_buf, DType::kFP32, {total_q, H}, c.pad);
  MlaOptions opts;
  opts.causal = c.causal;
  opts.scale = c.scale;
  reference::mla(args, opts);

  const double scale = c.scale ? double(*c.scale) : 1.0 / std::sqrt(double(kLatent + kRope));
  std::vector<double> got_out, want_out, got_lse, want_lse;
  for (int b = 0; b < batch; ++b) {
    const int q_len = c.q_lens[b], kv_len = c.kv_lens[b];
    for (int i = 0; i < q_len; ++i) {
      std::vector<char> allowed(kv_len);
      for (int j = 0; j < kv_len; ++j) allowed[j] = !c.causal || j <= kv_len - q_len + i;
      const int t = cu[b] + i;
      for (int h = 0; h < H; ++h) {
        const naive::RowResult r =
            naive::attend_row(q[t][h], keys[b], values[b], allowed, scale, 0.0, nullptr, kLatent);
        want_out.insert(want_out.end(), r.out.begin(), r.out.end());
        want_lse.push_back(r.lse);
        for (int d = 0; d < kLatent; ++d) {
          got_out.push_back(load_element(args.out, args.out.offset({t, h, d})));
        }
        got_lse.push_back(load_element(args.lse, args.lse.offset({t, h})));
      }
    }
  }
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
