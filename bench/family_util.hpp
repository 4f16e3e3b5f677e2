// Helpers the family workloads share: the mask options, paged-cache tables, repeated KV heads,
// sub-problem views.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "shape.hpp"
#include "tensor.hpp"

namespace hopattn::cli {

// Copies the row's mask (causal, window, softcap) into a family's options or config: the runs
// and the checks of every workload (AttentionOptions, DecodeOptions, BatchAttentionConfig) then
// take it from one place.
template <class Options>
void set_mask(Options& o, const Shape& s) {
  o.causal = s.causal;
  o.window = s.window;
  o.softcap = s.softcap;
}

// cu_seqlens [B + 1] of B requests of `len` tokens each.
inline Tensor uniform_cu_seqlens(int batch, int len) {
  std::vector<int32_t> cu(static_cast<size_t>(batch) + 1);
  for (int b = 0; b <= batch; ++b) cu[b] = b * len;
  return int32_tensor(cu);
}

// The pool's page ids 0 .. count - 1 in the order the requests take them: random by default, so
// logical and physical page order never coincide; --page-order in-order keeps them ascending
// (each request's pages one run of the pool, the requests one after another).
inline std::vector<int32_t> pool_page_order(int64_t count, bool in_order, uint64_t seed) {
  std::vector<int32_t> pages(static_cast<size_t>(count));
  std::iota(pages.begin(), pages.end(), 0);
  if (!in_order) std::shuffle(pages.begin(), pages.end(), std::mt19937_64(seed));
  return pages;
}

// A block table [B, pages_per_seq] naming every page of a pool of B * pages_per_seq pages once,
// in pool_page_order().
inline Tensor pool_block_table(int batch, int64_t pages_per_seq, bool in_order, uint64_t seed) {
  return int32_tensor(pool_page_order(batch * pages_per_seq, in_order, seed),
                      {batch, pages_per_seq});
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The [B, max_pages] block table entry of (request b, token t).
inline int64_t page_of(const Tensor& block_table, int64_t b, int64_t t, int64_t page_size) {
  const auto* table = static_cast<const int32_t*>(block_table.host_data());
  return table[b * block_table.shape()[1] + t / page_size];
}

// A view of rows [start, start + rows) of a varlen tensor [total, H, D] as dense [1, rows, H, D].
inline TensorView varlen_rows_as_dense(const TensorView& t, int64_t start, int64_t rows) {
  const TensorView r = narrow(t, 0, start, rows);
  return restride(r, {1, rows, t.size(1), t.size(2)},
                  {rows * t.stride(0), t.stride(0), t.stride(1), t.stride(2)});
}

}  // namespace hopattn::cli
