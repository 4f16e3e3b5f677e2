// Naive attention for the CPU reference tests: plain double arrays, one query row at a time, the
// textbook softmax. Deliberately shares no code with src/reference, so that the two can disagree.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hopattn/dtype.hpp"

namespace hopattn::testing::naive {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct RowResult {
  std::vector<double> out;
  double lse = -kInf;
};

// Attention of one query over keys[j] / values[j] (j < allowed.size()), only where allowed[j]:
//   s_j = softcap(scale * q.k_j), Z = sum_j e^{s_j} (+ e^{sink}), out = sum_j e^{s_j} v_j / Z,
//   lse = log Z. Nothing allowed and no sink: out = 0, lse = -inf. A NaN logit is not skipped:
//   it makes Z, and so the whole row, NaN.
inline RowResult attend_row(const std::vector<double>& q,
                            const std::vector<std::vector<double>>& keys,
                            const std::vector<std::vector<double>>& values,
                            const std::vector<char>& allowed, double scale, double softcap,
                            const double* sink, size_t value_dim) {
  RowResult r;
  r.out.assign(value_dim, 0.0);
  std::vector<double> s(allowed.size(), 0.0);
  double m = sink ? *sink : -kInf;
  bool nan = sink && std::isnan(*sink);
  for (size_t j = 0; j < allowed.size(); ++j) {
    if (!allowed[j]) continue;
    double dot = 0.0;
    for (size_t d = 0; d < q.size(); ++d) dot += q[d] * keys[j][d];
    s[j] = scale * dot;
    if (softcap > 0) s[j] = softcap * std::tanh(s[j] / softcap);
    nan |= std::isnan(s[j]);
    if (s[j] > m) m = s[j];
  }
  if (m == -kInf && !nan) return r;
  double z = sink ? std::exp(*sink - m) : 0.0;
  for (size_t j = 0; j < allowed.size(); ++j) {
    if (allowed[j]) z += std::exp(s[j] - m);
  }
  for (size_t j = 0; j < allowed.size(); ++j) {
    if (!allowed[j]) continue;
    const double p = std::exp(s[j] - m) / z;
    for (size_t d = 0; d < value_dim; ++d) r.out[d] += p * values[j][d];
  }
  r.lse = m + std::log(z);
  return r;
}

// Rounding error allowed between a double result and the same result stored in `dtype`: half an
// ulp relative (one ulp, to absorb the naive and reference summation orders), plus fp16's
// subnormal quantum.
inline double storage_tolerance(DType dtype, double magnitude) {
  switch (dtype) {
    case DType::kBF16:
      return std::ldexp(std::fabs(magnitude), -8) + 1e-30;
    case DType::kFP16:
      return std::ldexp(std::fabs(magnitude), -11) + 6e-8;
    default:
      return std::ldexp(std::fabs(magnitude), -23) + 1e-12;
  }
}

// got (read back from a `dtype` tensor) against want (double): every element within
// storage_tolerance, NaN nowhere, -inf exactly where expected. Reports the worst element.
inline ::testing::AssertionResult all_close(const std::vector<double>& got,
                                            const std::vector<double>& want, DType dtype,
                                            const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " vs " << want.size();
  }
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok;
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      ok = got[i] == want[i];
    } else {
      const double err = std::fabs(got[i] - want[i]);
      ok = err <= storage_tolerance(dtype, want[i]);  // false for NaN
      if (ok) worst = std::max(worst, err);
    }
    if (!ok) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements off; first at flat index "
         << first << ": got " << got[first] << ", want " << want[first];
}

}  // namespace hopattn::testing::naive
