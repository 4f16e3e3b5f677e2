// The math every reference family shares: which keys a query sees, softcap, and the softmax of
// one query row over its keys (with an optional sink). Double precision throughout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "hopattn/options.hpp"

namespace hopattn::reference {

inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Bottom-right alignment (DESIGN.md): query i of q_len is aligned with key i + kv_len - q_len.
inline bool key_visible(int64_t i, int64_t j, int64_t q_len, int64_t kv_len, bool causal,
                        Window window) {
  if (j < 0 || j >= kv_len) return false;
  const int64_t diag = i + kv_len - q_len;
  if (causal && j > diag) return false;
  if (window.left >= 0 && j < diag - window.left) return false;
  if (window.right >= 0 && j > diag + window.right) return false;
  return true;
}

inline double apply_softcap(double s, double softcap) {
  return softcap > 0 ? softcap * std::tanh(s / softcap) : s;
}

inline double default_scale(const std::optional<float>& scale, int head_dim_qk) {
  return scale ? double(*scale) : 1.0 / std::sqrt(double(head_dim_qk));
}

// Softmax of one row of logits in place: logits[j] (kNegInf = masked) -> probabilities.
// The sink (if any) joins the denominator only. Returns lse = log(denominator), kNegInf when the
// row sees nothing (then every probability is 0, never NaN). A NaN logit (NaN in q, in a visible
// key or in a KV scale) makes the whole row NaN, probabilities and lse, as torch SDPA does: a
// max that skipped it would otherwise report a row of NaN keys as one that sees nothing.
inline double softmax_row(double* logits, int64_t n, const double* sink) {
  double m = sink ? *sink : kNegInf;
  bool nan = std::isnan(m);
  for (int64_t j = 0; j < n; ++j) {
    nan |= std::isnan(logits[j]);
    m = std::max(m, logits[j]);
  }
  if (nan) {
    const double q_nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t j = 0; j < n; ++j) logits[j] = q_nan;
    return q_nan;
  }
  if (m == kNegInf) {
    for (int64_t j = 0; j < n; ++j) logits[j] = 0.0;
    return kNegInf;
  }
  double denom = sink ? std::exp(*sink - m) : 0.0;
  for (int64_t j = 0; j < n; ++j) {
    logits[j] = logits[j] == kNegInf ? 0.0 : std::exp(logits[j] - m);
    denom += logits[j];
  }
  for (int64_t j = 0; j < n; ++j) logits[j] /= denom;
  return m + std::log(denom);
}

}  // namespace hopattn::reference
