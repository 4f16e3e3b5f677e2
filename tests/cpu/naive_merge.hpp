// Naive merge of attention states for the tests. States are folded in one at a time, each pair
// combined by log-add-exp (lse = hi + log1p(e^(lo - hi))), where the reference weighs all states
// at once against the largest lse: the same mathematics computed another way, so a slip in
// either shows up as a disagreement.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "naive_attention.hpp"

namespace hopattn::testing::naive {

struct State {
  std::vector<double> o;
  double lse = -kInf;  // -inf: empty (no key), whatever o holds
};

inline State merge_pair(const State& a, const State& b, size_t dim) {
  if (std::isnan(a.lse) || std::isnan(b.lse)) {
    return {std::vector<double>(dim, a.lse + b.lse), a.lse + b.lse};
  }
  if (b.lse == -kInf) return a.lse == -kInf ? State{std::vector<double>(dim, 0.0), -kInf} : a;
  if (a.lse == -kInf) return b;
  const double hi = std::max(a.lse, b.lse), lo = std::min(a.lse, b.lse);
  State m;
  m.lse = hi + std::log1p(std::exp(lo - hi));
  m.o.resize(dim);
  const double wa = std::exp(a.lse - m.lse), wb = std::exp(b.lse - m.lse);
  for (size_t d = 0; d < dim; ++d) m.o[d] = wa * a.o[d] + wb * b.o[d];
  return m;
}

// The state of the union of the states' (disjoint) key sets; no state, or only empty ones, give
// the empty state (o = 0, lse = -inf).
inline State merge_all(const std::vector<State>& states, size_t dim) {
  State acc{std::vector<double>(dim, 0.0), -kInf};
  for (const State& s : states) acc = merge_pair(acc, s, dim);
  return acc;
}

}  // namespace hopattn::testing::naive
