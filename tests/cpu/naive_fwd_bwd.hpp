// Naive fwd/bwd attention for the reference tests: each request as plain double arrays in logical
// order, the mask as an explicit [q_len, kv_len] matrix, the textbook softmax (no running max, no
// intervals) and the textbook matrix gradients. It shares no code with src/reference on purpose:
// the two are written differently so that a slip in either shows up as a disagreement.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "hopattn/dtype.hpp"

namespace hopattn::testing::textbook {

struct Config {
  int64_t hq = 1, hkv = 1, dqk = 1, dv = 1;
  double scale = 1.0;  // already resolved (no default here)
  double softcap = 0.0;
  bool causal = false;
  int window_left = -1, window_right = -1;
};

// One request in logical order: q [q_len][hq][dqk], k [kv_len][hkv][dqk], v [kv_len][hkv][dv],
// dout [q_len][hq][dv].
struct Request {
  int64_t q_len = 0, kv_len = 0;
  std::vector<double> q, k, v, dout;
};

struct Forward {
  std::vector<double> out;  // [q_len][hq][dv]
  std::vector<double> lse;  // [q_len][hq]
};

struct Backward {
  std::vector<double> dq, dk, dv;  // shapes of q, k, v
  std::vector<double> dsinks;      // [hq], this request's share
  // Each dq / dk element's sum of the magnitudes of its terms, dS = P (dP - D) taken with
  // |dP| and |D| as sums of absolute products: how large what cancels in it is. An fp32 kernel's
  // error on an element that cancels to ~0 (one visible key: dP = D exactly) is a few ulps of this,
  // not of the element (tests/fuzz/check.cpp).
  std::vector<double> dq_terms, dk_terms;
};

// mask[i][j]: query i sees key j. Key j sits `rel` places right of query i's diagonal, where the
// diagonal of the last query is the last key (bottom-right alignment).
inline std::vector<std::vector<bool>> mask_matrix(const Config& c, int64_t q_len, int64_t kv_len) {
  std::vector<std::vector<bool>> m(q_len, std::vector<bool>(kv_len, true));
  for (int64_t i = 0; i < q_len; ++i) {
    for (int64_t j = 0; j < kv_len; ++j) {
      const int64_t rel = j - (i + (kv_len - q_len));
      if (c.causal && rel > 0) m[i][j] = false;
      if (c.window_left >= 0 && -rel > c.window_left) m[i][j] = false;
      if (c.window_right >= 0 && rel > c.window_right) m[i][j] = false;
    }
  }
  return m;
}

// Everything about one head of one request, in matrices.
struct HeadMatrices {
  std::vector<std::vector<bool>> mask;  // mask_matrix(): which pairs exist at all
  std::vector<std::vector<double>> x;   // scale * q.k before the cap
  std::vector<std::vector<double>> p;   // probabilities (0 where masked)
  std::vector<double> z;                // softmax denominators (sink included)
  std::vector<std::vector<double>> o;   // [q_len][dv]
};

inline double q_at(const Config& c, const Request& r, int64_t i, int64_t h, int64_t d) {
  return r.q[(i * c.hq + h) * c.dqk + d];
}
inline double k_at(const Config& c, const Request& r, int64_t j, int64_t g, int64_t d) {
  return r.k[(j * c.hkv + g) * c.dqk + d];
}
inline double v_at(const Config& c, const Request& r, int64_t j, int64_t g, int64_t d) {
  return r.v[(j * c.hkv + g) * c.dv + d];
}
inline double dout_at(const Config& c, const Request& r, int64_t i, int64_t h, int64_t d) {
  return r.dout[(i * c.hq + h) * c.dv + d];
}

inline HeadMatrices head_matrices(const Config& c, const Request& r, int64_t h,
                                  const std::vector<double>& sinks) {
  const int64_t g = h / (c.hq / c.hkv);
  const auto mask = mask_matrix(c, r.q_len, r.kv_len);
  HeadMatrices m;
  m.mask = mask;
  m.x.assign(r.q_len, std::vector<double>(r.kv_len, 0.0));
  m.p = m.x;
  m.z.assign(r.q_len, 0.0);
  m.o.assign(r.q_len, std::vector<double>(c.dv, 0.0));
  for (int64_t i = 0; i < r.q_len; ++i) {
    std::vector<double> e(r.kv_len, 0.0);
    for (int64_t j = 0; j < r.kv_len; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < c.dqk; ++d) dot += q_at(c, r, i, h, d) * k_at(c, r, j, g, d);
      m.x[i][j] = c.scale * dot;
      const double s = c.softcap > 0 ? c.softcap * std::tanh(m.x[i][j] / c.softcap) : m.x[i][j];
      if (mask[i][j]) e[j] = std::exp(s);
      m.z[i] += e[j];
    }
    if (!sinks.empty()) m.z[i] += std::exp(sinks[h]);
    if (m.z[i] == 0.0) continue;  // nothing visible and no sink: zero row
    for (int64_t j = 0; j < r.kv_len; ++j) {
      // Masked pairs stay at p = 0 and add nothing, even where z (a NaN row) or v is NaN.
      if (!mask[i][j]) continue;
      m.p[i][j] = e[j] / m.z[i];
      for (int64_t d = 0; d < c.dv; ++d) m.o[i][d] += m.p[i][j] * v_at(c, r, j, g, d);
    }
  }
  return m;
}

// sinks: [hq] or empty.
inline Forward forward(const Config& c, const Request& r, const std::vector<double>& sinks) {
  Forward f;
  f.out.assign(r.q_len * c.hq * c.dv, 0.0);
  f.lse.assign(r.q_len * c.hq, 0.0);
  for (int64_t h = 0; h < c.hq; ++h) {
    const HeadMatrices m = head_matrices(c, r, h, sinks);
    for (int64_t i = 0; i < r.q_len; ++i) {
      f.lse[i * c.hq + h] = std::log(m.z[i]);  // log(0) = -inf for an empty row
      for (int64_t d = 0; d < c.dv; ++d) f.out[(i * c.hq + h) * c.dv + d] = m.o[i][d];
    }
  }
  return f;
}

// Gradients of L = sum(out * dout), from the forward's saved statistics as the library defines
// them (attention_backward reads the out and lse it is given):
//   P = exp(S - lse), dV = P^T dO, dP = dO V^T, D = rowsum(dO * out), dS = P * (dP - D),
//   dX = dS * (1 - tanh^2(X / softcap)), dQ = scale dX K, dK = scale dX^T Q,
//   dsink = -sum_i e^(sink - lse_i) D_i.
// `saved`: the out and lse the backward is handed (as stored: rounded to their dtypes); null:
// this formula's own forward in double (the exact gradient). A row with lse = -inf has none.
inline Backward backward(const Config& c, const Request& r, const std::vector<double>& sinks,
                         const Forward* saved = nullptr) {
  Backward b;
  b.dq.assign(r.q.size(), 0.0);
  b.dk.assign(r.k.size(), 0.0);
  b.dv.assign(r.v.size(), 0.0);
  b.dsinks.assign(c.hq, 0.0);
  b.dq_terms.assign(r.q.size(), 0.0);
  b.dk_terms.assign(r.k.size(), 0.0);
  const Forward own = saved == nullptr ? forward(c, r, sinks) : Forward{};
  const Forward& f = saved == nullptr ? own : *saved;
  for (int64_t h = 0; h < c.hq; ++h) {
    const int64_t g = h / (c.hq / c.hkv);
    const HeadMatrices m = head_matrices(c, r, h, sinks);
    for (int64_t i = 0; i < r.q_len; ++i) {
      const double lse = f.lse[i * c.hq + h];
      if (lse == -std::numeric_limits<double>::infinity()) continue;
      double delta = 0.0, delta_terms = 0.0;
      for (int64_t d = 0; d < c.dv; ++d) {
        const double t = dout_at(c, r, i, h, d) * f.out[(i * c.hq + h) * c.dv + d];
        delta += t;
        delta_terms += std::fabs(t);
      }
      if (!sinks.empty()) b.dsinks[h] -= std::exp(sinks[h] - lse) * delta;
      for (int64_t j = 0; j < r.kv_len; ++j) {
        if (!m.mask[i][j]) continue;  // no such pair: no gradient flows through it
        const double x = m.x[i][j];
        const double p = std::exp((c.softcap > 0 ? c.softcap * std::tanh(x / c.softcap) : x) - lse);
        double dp = 0.0, dp_terms = 0.0;
        for (int64_t d = 0; d < c.dv; ++d) {
          const double t = dout_at(c, r, i, h, d) * v_at(c, r, j, g, d);
          dp += t;
          dp_terms += std::fabs(t);
          b.dv[(j * c.hkv + g) * c.dv + d] += p * dout_at(c, r, i, h, d);
        }
        double dx = p * (dp - delta);
        double dx_terms = p * (dp_terms + delta_terms);
        if (c.softcap > 0) {
          const double t = std::tanh(x / c.softcap);
          dx *= 1.0 - t * t;
          dx_terms *= 1.0 - t * t;
        }
        for (int64_t d = 0; d < c.dqk; ++d) {
          b.dq[(i * c.hq + h) * c.dqk + d] += c.scale * dx * k_at(c, r, j, g, d);
          b.dk[(j * c.hkv + g) * c.dqk + d] += c.scale * dx * q_at(c, r, i, h, d);
          b.dq_terms[(i * c.hq + h) * c.dqk + d] +=
              std::fabs(c.scale * dx_terms * k_at(c, r, j, g, d));
          b.dk_terms[(j * c.hkv + g) * c.dqk + d] +=
              std::fabs(c.scale * dx_terms * q_at(c, r, i, h, d));
        }
      }
    }
  }
  return b;
}

// Largest rounding error of storing a double in `dtype` (half an ulp, relative), doubled to
// absorb summation-order differences, plus an absolute floor for results that cancel to ~0.
inline double storage_tolerance(DType dtype, double want) {
  switch (dtype) {
    case DType::kBF16:
      return std::ldexp(std::fabs(want), -8) + 1e-12;
    case DType::kFP16:
      return std::ldexp(std::fabs(want), -11) + 6e-8;  // + fp16's subnormal quantum
    default:
      return std::ldexp(std::fabs(want), -23) + 1e-12;
  }
}

// got (read back from a `dtype` tensor) vs want (double): within storage_tolerance everywhere,
// infinities equal exactly, NaN nowhere.
inline ::testing::AssertionResult close_in_dtype(const std::vector<double>& got,
                                                 const std::vector<double>& want, DType dtype,
                                                 const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " elements, want " << want.size();
  }
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isinf(want[i]) || std::isinf(got[i])
                        ? got[i] == want[i]
                        : std::fabs(got[i] - want[i]) <= storage_tolerance(dtype, want[i]);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements off; first at " << first
         << ": got " << got[first] << ", want " << want[first];
}

// Bitwise-equal doubles (NaN never equal): for layouts that must not change a single rounding.
inline ::testing::AssertionResult identical(const std::vector<double>& got,
                                            const std::vector<double>& want,
                                            const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " elements, want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      return ::testing::AssertionFailure()
             << what << ": element " << i << " is " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace hopattn::testing::textbook
