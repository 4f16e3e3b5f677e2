// Test-side construction of MLA problems and their naive answer: the query is the concatenation
// [q_nope, q_pe] and each key the concatenation [ckv, kpe] (576 features), the value is ckv,
// through the textbook softmax of naive_attention.hpp. The latent cache is paged by the test's own
// address math, pages shuffled, unused slots and the outputs poisoned with NaN beforehand.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "hopattn/options.hpp"
#include "naive_attention.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::mla_case {

inline constexpr int kLatent = kMlaLatentDim, kRope = kMlaRopeDim;

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

// A view of `shape` into `buf` whose innermost dimension is padded by `pad` elements.
inline TensorView padded_view(HostTensor& buf, DType dtype, std::vector<int64_t> shape, int pad) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i] + (i == int(shape.size()) - 1 ? pad : 0);
  }
  return TensorView(buf.data(), dtype, int(shape.size()), shape.data(), strides.data());
}

// One MLA call's tensors plus the logical data they were built from.
struct MlaRun {
  MlaCase c;
  std::vector<int32_t> cu;                                     // cu_seqlens_q
  std::vector<std::vector<std::vector<double>>> q;             // q[t][h]: [q_nope, q_pe] as stored
  std::vector<std::vector<std::vector<double>>> keys, values;  // [b][j]: real (dequantized)
  HostTensor qn_buf, qp_buf, ckv_buf, kpe_buf, out_buf, lse_buf;
  HostTensor cu_t, lens, table_t, indptr_t, indices_t;
  MlaArgs args;
  MlaOptions opts;

  double scale() const {
    return c.scale ? double(*c.scale) : 1.0 / std::sqrt(double(kLatent + kRope));
  }
};

inline std::unique_ptr<MlaRun> build(const MlaCase& c, std::mt19937_64& rng) {
  auto r = std::make_unique<MlaRun>();
  r->c = c;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int batch = int(c.q_lens.size());
  const int total_q = std::accumulate(c.q_lens.begin(), c.q_lens.end(), 0);
  const int H = c.heads, ps = c.page_size;

  r->cu.assign(1, 0);
  for (int n : c.q_lens) r->cu.push_back(r->cu.back() + n);
  r->qn_buf = HostTensor(c.q_dtype, {total_q, H, kLatent + c.pad});
  r->qp_buf = HostTensor(c.q_dtype, {total_q, H, kRope + c.pad});
  const TensorView qn = padded_view(r->qn_buf, c.q_dtype, {total_q, H, kLatent}, c.pad);
  const TensorView qp = padded_view(r->qp_buf, c.q_dtype, {total_q, H, kRope}, c.pad);
  r->q.assign(total_q, std::vector<std::vector<double>>(H));
  for (int t = 0; t < total_q; ++t) {
    for (int h = 0; h < H; ++h) {
      for (int d = 0; d < kLatent + kRope; ++d) {
        const TensorView& dst = d < kLatent ? qn : qp;
        const int64_t off = dst.offset({t, h, d < kLatent ? d : d - kLatent});
        store_element(dst, off, 2.0 * u(rng));
        r->q[t][h].push_back(load_element(dst, off));
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
  r->ckv_buf = HostTensor(c.kv_dtype, {num_pages, ps, kLatent + c.pad});
  r->kpe_buf = HostTensor(c.kv_dtype, {num_pages, ps, kRope + c.pad});
  r->ckv_buf.fill_bytes(0xff);
  r->kpe_buf.fill_bytes(0xff);
  const TensorView ckv = padded_view(r->ckv_buf, c.kv_dtype, {num_pages, ps, kLatent}, c.pad);
  const TensorView kpe = padded_view(r->kpe_buf, c.kv_dtype, {num_pages, ps, kRope}, c.pad);
  std::vector<int32_t> table(size_t(batch) * std::max(max_pages, 1), physical.back());
  std::vector<int32_t> indptr(1, 0), indices;
  r->keys.resize(batch);
  r->values.resize(batch);
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
      r->values[b].emplace_back(key.begin(), key.begin() + kLatent);
      r->keys[b].push_back(std::move(key));
    }
  }

  r->cu_t = int_tensor(r->cu);
  r->lens = int_tensor(c.kv_lens);
  r->table_t = int_tensor(table, {batch, std::max(max_pages, 1)});
  if (indices.empty()) indices.push_back(0);
  r->indptr_t = int_tensor(indptr);
  r->indices_t = int_tensor(indices);
  r->out_buf = HostTensor(c.q_dtype, {total_q, H, kLatent + c.pad});
  r->lse_buf = HostTensor(DType::kFP32, {total_q, H + c.pad});
  r->out_buf.fill_bytes(0xff);
  r->lse_buf.fill_bytes(0xff);

  MlaArgs& a = r->args;
  a.q_nope = qn;
  a.q_pe = qp;
  a.ckv = ckv;
  a.kpe = kpe;
  a.kv_scale = c.kv_scale;
  a.cu_seqlens_q = r->cu_t;
  a.max_seqlen_q = batch ? *std::max_element(c.q_lens.begin(), c.q_lens.end()) : 0;
  a.pages.kv_lens = r->lens;
  if (c.csr) {
    a.pages.indptr = r->indptr_t;
    a.pages.indices = r->indices_t;
  } else {
    a.pages.block_table = r->table_t;
  }
  a.out = padded_view(r->out_buf, c.q_dtype, {total_q, H, kLatent}, c.pad);
  a.lse = padded_view(r->lse_buf, DType::kFP32, {total_q, H}, c.pad);
  r->opts.causal = c.causal;
  r->opts.scale = c.scale;
  return r;
}

// The naive answer in logical order: out [total_q][H][512], lse [total_q][H].
inline void naive_outputs(const MlaRun& r, std::vector<double>& out, std::vector<double>& lse) {
  const MlaCase& c = r.c;
  out.clear();
  lse.clear();
  for (size_t b = 0; b < c.q_lens.size(); ++b) {
    const int q_len = c.q_lens[b], kv_len = c.kv_lens[b];
    for (int i = 0; i < q_len; ++i) {
      std::vector<char> allowed(kv_len);
      for (int j = 0; j < kv_len; ++j) allowed[j] = !c.causal || j <= kv_len - q_len + i;
      for (int h = 0; h < c.heads; ++h) {
        const naive::RowResult row = naive::attend_row(r.q[r.cu[b] + i][h], r.keys[b], r.values[b],
                                                       allowed, r.scale(), 0.0, nullptr, kLatent);
        out.insert(out.end(), row.out.begin(), row.out.end());
        lse.push_back(row.lse);
      }
    }
  }
}

// What the call wrote, read back through the output views in the same logical order.
inline void read_outputs(const MlaRun& r, std::vector<double>& out, std::vector<double>& lse) {
  out = gather(r.args.out);
  lse = gather(r.args.lse);
}

}  // namespace hopattn::testing::mla_case
