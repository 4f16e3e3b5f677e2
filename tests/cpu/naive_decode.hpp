// Naive decode for the tests: the whole problem as plain double arrays in logical order (no pages,
// no dtypes, already dequantized), the mask spelled out as an explicit [q_len, kv_len] matrix.
#pragma once

#include <cstdint>
#include <vector>

#include "naive_attention.hpp"

namespace hopattn::testing::naive {

struct DecodeProblem {
  int batch = 0, q_len = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  std::vector<int> kv_lens;  // [batch], including the q_len new tokens
  std::vector<double> q;     // [batch][q_len][q_heads][head_dim]
  // Real (dequantized) keys and values as each row sees them: k[b][h][t][d].
  std::vector<std::vector<std::vector<std::vector<double>>>> k, v;
  std::vector<double> sinks;  // [q_heads], empty = none
  std::vector<char> tree;     // [batch][q_len][q_len], empty = none
  bool causal = true;
  int window_left = -1, window_right = -1;
  double softcap = 0.0;
  double scale = 0.0;
};

// allowed[i][j]: does query i (at absolute position kv_len - q_len + i) see key j < kv_len?
inline std::vector<std::vector<char>> decode_mask(const DecodeProblem& p, int b) {
  const int n = p.kv_lens[b];
  const int draft_start = n - p.q_len;  // first of the q_len new tokens
  std::vector<std::vector<char>> allowed(p.q_len, std::vector<char>(n, 0));
  for (int i = 0; i < p.q_len; ++i) {
    const int pos = draft_start + i;
    for (int j = 0; j < n; ++j) {
      bool ok;
      if (!p.tree.empty()) {
        ok = j < draft_start ||
             p.tree[(static_cast<size_t>(b) * p.q_len + i) * p.q_len + (j - draft_start)];
      } else {
        ok = !p.causal || j <= pos;
      }
      if (p.window_left >= 0 && j < pos - p.window_left) ok = false;
      if (p.window_right >= 0 && j > pos + p.window_right) ok = false;
      allowed[i][j] = ok;
    }
  }
  return allowed;
}

// out [batch][q_len][q_heads][head_dim], lse [batch][q_len][q_heads].
inline void decode(const DecodeProblem& p, std::vector<double>& out, std::vector<double>& lse) {
  const int group = p.q_heads / p.kv_heads;
  out.assign(static_cast<size_t>(p.batch) * p.q_len * p.q_heads * p.head_dim, 0.0);
  lse.assign(static_cast<size_t>(p.batch) * p.q_len * p.q_heads, 0.0);
  for (int b = 0; b < p.batch; ++b) {
    const auto allowed = decode_mask(p, b);
    for (int i = 0; i < p.q_len; ++i) {
      for (int h = 0; h < p.q_heads; ++h) {
        const size_t row = (static_cast<size_t>(b) * p.q_len + i) * p.q_heads + h;
        std::vector<double> q(p.q.begin() + row * p.head_dim, p.q.begin() + (row + 1) * p.head_dim);
        const double* sink = p.sinks.empty() ? nullptr : &p.sinks[h];
        const RowResult r = attend_row(q, p.k[b][h / group], p.v[b][h / group], allowed[i], p.scale,
                                       p.softcap, sink, p.head_dim);
        for (int d = 0; d < p.head_dim; ++d) out[row * p.head_dim + d] = r.out[d];
        lse[row] = r.lse;
      }
    }
  }
}

}  // namespace hopattn::testing::naive
