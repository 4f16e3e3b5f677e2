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

// A block table [B, pages_per_seq] naming every page of a pool of B * pages_per_seq pages once,
// in random order, so logical and physical page order never coincide.
inline Tensor shuffled_block_table(int batch, int64_t pages_per_seq, uint64_t seed) {
  std::vector<int32_t> pages(static_cast<size_t>(batch * pages_per_seq));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937_64(seed));
  return int32_tensor(pages, {batch, pages_per_seq});
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
