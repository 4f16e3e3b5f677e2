#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <sstream>

#include "cpu/naive_fwd_bwd.hpp"
#include "hopattn/error.hpp"

namespace hopattn::fuzz {
namespace {

std::string bracketed(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

// The multi-index of flat (row-major) element `flat` of `shape`.
std::string index_string(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    idx[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return bracketed(idx);
}

// The unit roundoff a kernel's products and sums carry for inputs of `dtype`.
double kernel_roundoff(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kFP16:
      return std::ldexp(1.0, -11);
    default:
      return std::ldexp(1.0, -17);
  }
}

// One unit in the last place of `value` stored in `dtype` (the subnormal quantum below the normal
// range).
double output_ulp(DType dtype, double value) {
  int mantissa = 23, min_exp = -126;
  if (dtype == DType::kBF16) mantissa = 7;
  if (dtype == DType::kFP16) mantissa = 10, min_exp = -14;
  const double a = std::fabs(value);
  const int e = a > 0 && std::isfinite(a) ? std::max(std::ilogb(a), min_exp) : min_exp;
  return std::ldexp(1.0, e - mantissa);
}

bool element_ok(double a, double b, double allowed) {
  if (std::isnan(a) || std::isnan(b)) return false;
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= allowed;
}

}  // namespace

const char* kind_name(Report::Kind k) {
  switch (k) {
    case Report::Kind::kPass:
      return "pass";
    case Report::Kind::kMismatch:
      return "mismatch";
    case Report::Kind::kRejected:
      return "rejected";
    case Report::Kind::kCrash:
      return "exception";
    case Report::Kind::kAccepted:
      return "accepted";
    case Report::Kind::kSkipped:
      return "skipped";
  }
  return "?";
}

Report compare(const Outputs& a, const Outputs& b, const Tolerance& tol) {
  std::ostringstream os;
  if (a.size() != b.size()) {
    os << "the implementations returned " << a.size() << " and " << b.size() << " outputs";
    return {Report::Kind::kMismatch, os.str()};
  }
  for (size_t p = 0; p < a.size(); ++p) {
    const Part& pa = a[p];
    const Part& pb = b[p];
    if (pa.name != pb.name || pa.values.size() != pb.values.size()) {
      os << "output " << p << ": '" << pa.name << "' with " << pa.values.size() << " elements vs '"
         << pb.name << "' with " << pb.values.size();
      return {Report::Kind::kMismatch, os.str()};
    }
    int64_t bad = 0, first = -1, worst = -1;
    double worst_excess = -1;
    const double spread_of_kind = pb.kind == Part::Kind::kValue  ? tol.value_spread
                                  : pb.kind == Part::Kind::kGrad ? tol.grad_spread
                                                                 : 0.0;
    double spread = 0;
    if (spread_of_kind > 0) {
      double max_abs = 0;
      for (double y : pb.values) {
        if (std::isfinite(y)) max_abs = std::max(max_abs, std::fabs(y));
      }
      // A gradient whose terms cancel exactly in the reference (one visible key: dS = P (dP - D)
      // with P = 1) is the residue of O(1) terms in the kernel's fp32 arithmetic, not zero:
      // measured 0.8e-7 .. 3.6e-7 on an H200 (2026-12-01). Its scale is floored at 2^-10; where
      // the reference knows the size of the terms (Part::terms), term_roundoff covers more.
      if (pb.kind == Part::Kind::kGrad) max_abs = std::max(max_abs, 1.0 / 1024);
      spread = spread_of_kind * kernel_roundoff(pb.inputs) * max_abs;
    }
    auto allowed = [&](int64_t i) {
      return std::max(tol.rounding * testing::textbook::storage_tolerance(pb.dtype, pb.values[i]),
                      tol.output_ulps * output_ulp(pb.dtype, pb.values[i])) +
             (pb.kind == Part::Kind::kLse ? tol.lse_abs : 0.0) + spread +
             (pb.terms.empty() ? 0.0 : tol.term_roundoff * pb.terms[i]) +
             pb.slack * (1.0 + std::fabs(pb.values[i]));
    };
    for (int64_t i = 0; i < int64_t(pa.values.size()); ++i) {
      const double x = pa.values[i], y = pb.values[i];
      if (element_ok(x, y, allowed(i))) continue;
      if (bad++ == 0) first = i;
      // NaN or a wrong infinity outranks any finite excess.
      const double excess = std::isfinite(x - y) ? std::fabs(x - y) / allowed(i) : INFINITY;
      if (excess > worst_excess) worst_excess = excess, worst = i;
    }
    if (bad == 0) continue;
    auto element = [&](int64_t i) {
      std::ostringstream e;
      e.precision(9);
      e << index_string(pb.shape, i) << ": " << pa.values[i] << " vs " << pb.values[i]
        << " (allowed +-" << allowed(i) << ")";
      return e.str();
    };
    os << pa.name << ' ' << bracketed(pb.shape) << " (" << dtype_name(pb.dtype) << "): " << bad
       << " of " << pa.values.size() << " elements off; first at " << element(first);
    if (worst != first) os << "; worst at " << element(worst);
    return {Report::Kind::kMismatch, os.str()};
  }
  return {};
}

Report run_pair(const Case& c, const Implementation& a, const Implementation& b,
                const Tolerance& tol) {
  const Implementation* current = nullptr;
  try {
    std::unique_ptr<HostProblem> problem = build(c);
    current = &a;
    const Outputs out_a = a.run(*problem);
    current = &b;
    Outputs out_b = b.run(*problem);
    if (tol.term_roundoff > 0) attach_gradient_terms(*problem, out_b);
    Report r = compare(out_a, out_b, tol);
    if (!r.ok()) r.detail = a.name + " vs " + b.name + ": " + r.detail;
    return r;
  } catch (const Error& e) {
    if (current && current->declines && current->declines(e)) {
      return {Report::Kind::kSkipped, current->name + " declined: " + e.what()};
    }
    return {Report::Kind::kRejected, (current ? current->name : std::string("build")) +
                                         " rejected a valid case: " + e.what()};
  } catch (const std::exception& e) {
    return {Report::Kind::kCrash,
            (current ? current->name : std::string("build")) + " threw: " + e.what()};
  }
}

}  // namespace hopattn::fuzz
