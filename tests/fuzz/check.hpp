// "Implementation A vs implementation B" on one fuzz case. An implementation turns a case's host
// problem into its outputs, in logical order; run_pair() builds the problem, runs both, compares
// every output with the tolerance and says what went wrong, if anything.
//
// The CPU run pairs public_api() (the validators, then the CPU reference) with naive_formulas()
// (tests/cpu/naive_*.hpp). A GPU run pairs a CUDA implementation (upload, launch, download) with
// public_api() on the same cases.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "case.hpp"
#include "problem.hpp"

namespace hopattn::fuzz {

// One output of a call in logical order, e.g. "dk of request 2" [kv_len, Hkv, Dqk].
struct Part {
  enum class Kind { kValue, kLse };
  std::string name;
  Kind kind = Kind::kValue;
  DType dtype = DType::kFP32;  // what the values were stored in (their rounding)
  std::vector<int64_t> shape;
  std::vector<double> values;
};
using Outputs = std::vector<Part>;

struct Implementation {
  std::string name;
  std::function<Outputs(HostProblem&)> run;
};

// hopattn's public entry points on the host tensors: argument validation, then the CPU reference.
Implementation public_api();
// The independent naive formulas on the logical data.
Implementation naive_formulas();

// How far B may be from A. Every element: |a - b| <= rounding * the storage bound of the part's
// dtype at b (textbook::storage_tolerance: rounding an exact result once, either side's summation
// order, an absolute floor for results that cancel to ~0), plus lse_abs on LSE parts. NaN on
// either side never passes; infinities must be equal.
//
// reference_vs_naive(): both compute in double from the same stored inputs and round once, so
// they may differ by that one rounding and nothing else. This is far tighter than DESIGN.md's
// kernel tolerance (2x a plain 16-bit implementation's error, LSE 1e-3, 8-bit KV rel-L2 2e-2),
// which kernels are held to against the reference; the reference, being the oracle, must be
// right to the last bit a stored result can show.
struct Tolerance {
  double rounding = 1.0;
  double lse_abs = 0.0;
  static Tolerance reference_vs_naive() { return {}; }
};

struct Report {
  enum class Kind {
    kPass,
    kMismatch,  // outputs differ (or NaN)
    kRejected,  // an implementation threw hopattn::Error for a case that is valid
    kCrash,     // any other exception
    kAccepted,  // an invalid case (invalid.hpp) went through without an error
  };
  Kind kind = Kind::kPass;
  std::string detail;  // what differed, or the exception's message
  bool ok() const { return kind == Kind::kPass; }
};
const char* kind_name(Report::Kind k);

Report compare(const Outputs& a, const Outputs& b, const Tolerance& tol);
Report run_pair(const Case& c, const Implementation& a, const Implementation& b,
                const Tolerance& tol);

}  // namespace hopattn::fuzz
