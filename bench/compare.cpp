#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "common/element_access.hpp"

namespace hopattn::cli {
namespace {

// Element offsets of a view in row-major order of its logical index.
std::vector<int64_t> offsets(const TensorView& t) {
  std::vector<int64_t> out;
  if (t.numel() == 0) return out;
  out.reserve(static_cast<size_t>(t.numel()));
  std::vector<int64_t> index(t.rank(), 0);
  while (true) {
    int64_t off = 0;
    for (int d = 0; d < t.rank(); ++d) off += index[d] * t.stride(d);
    out.push_back(off);
    int d = t.rank() - 1;
    for (; d >= 0; --d) {
      if (++index[d] < t.size(d)) break;
      index[d] = 0;
    }
    if (d < 0) return out;
  }
}

}  // namespace

void ErrorStats::merge(const ErrorStats& o) {
  max_abs = std::max(max_abs, o.max_abs);
  rel_l2 = std::max(rel_l2, o.rel_l2);
  finite = finite && o.finite;
}

ErrorStats compare_views(const TensorView& got, const TensorView& want) {
  ErrorStats e;
  if (got.numel() != want.numel()) {
    e.finite = false;
    return e;
  }
  const std::vector<int64_t> g = offsets(got), w = offsets(want);
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double a = load_element(got, g[i]), b = load_element(want, w[i]);
    if (a == b) {
      if (std::isfinite(b)) den += b * b;
      continue;
    }
    const double d = std::fabs(a - b);
    if (!std::isfinite(d)) {
      e.finite = false;
      continue;
    }
    e.max_abs = std::max(e.max_abs, d);
    num += d * d;
    den += b * b;
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

Check judge(const ErrorStats& out, const ErrorStats* lse, double out_rel_l2) {
  Check c;
  c.max_err = out.finite ? out.max_abs : std::numeric_limits<double>::quiet_NaN();
  std::ostringstream why;
  if (!out.finite) {
    why << "NaN/Inf in the output";
  } else if (out.rel_l2 > out_rel_l2) {
    why << "output rel L2 error " << out.rel_l2 << " > " << out_rel_l2;
  } else if (lse != nullptr && !lse->finite) {
    why << "NaN/Inf mismatch in lse";
  } else if (lse != nullptr && lse->max_abs > 1e-3) {
    why << "lse error " << lse->max_abs << " > 1e-3";
  }
  c.why = why.str();
  c.ok = c.why.empty();
  return c;
}

Check judge_out_lse(const TensorView& out, const TensorView& want_out, const TensorView& lse,
                    const TensorView& want_lse, double out_rel_l2) {
  const ErrorStats e_out = compare_views(out, want_out);
  const ErrorStats e_lse = compare_views(lse, want_lse);
  return judge(e_out, &e_lse, out_rel_l2);
}

}  // namespace hopattn::cli
