// "Implementation A vs implementation B" on one fuzz case. An implementation turns a case's host
// problem into its outputs, in logical order; run_pair() builds the problem, runs both, compares
// every output with the tolerance and says what went wrong, if anything.
//
// The CPU run pairs public_api() (the validators, then the CPU reference) with naive_formulas()
// (tests/cpu/naive_*.hpp). A GPU run (gpu/gpu_fuzz_test.cpp) pairs a CUDA implementation
// (upload, launch, download) with public_api() on the same cases.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "case.hpp"
#include "hopattn/error.hpp"
#include "problem.hpp"

namespace hopattn::fuzz {

// One output of a call in logical order, e.g. "dk of request 2" [kv_len, Hkv, Dqk].
struct Part {
  enum class Kind { kValue, kGrad, kLse };
  std::string name;
  Kind kind = Kind::kValue;
  DType dtype = DType::kFP32;  // what the values were stored in (their rounding)
  std::vector<int64_t> shape;
  std::vector<double> values;
  DType inputs = DType::kFP32;  // the call's q dtype: what a kernel's products round through
  // Per element, the sum of the magnitudes of the terms that make it (empty: not known). A kernel
  // accumulating in fp32 is off by a few ulps of this where the terms cancel (a gradient whose
  // reference is ~0); set on the reference's dq and dk (attach_gradient_terms).
  std::vector<double> terms;
  // What an implementation may carry past one rounding of the stored result, relative to
  // 1 + |element|: the batch family merges split rows from fp32 partial states (2^-21).
  double slack = 0.0;
};
using Outputs = std::vector<Part>;

struct Implementation {
  std::string name;
  std::function<Outputs(HostProblem&)> run;
  // Errors of this one that skip the case (Report::kSkipped) instead of failing it: the CUDA
  // kernels do not cover every case the reference does. Empty: every error fails.
  std::function<bool(const Error&)> declines;
};

// hopattn's public entry points on the host tensors: argument validation, then the CPU reference.
Implementation public_api();
// The independent naive formulas on the logical data.
Implementation naive_formulas();

// The outputs of a case as its host tensors hold them after a call: public_api() reads them
// after the CPU call, a device implementation after downloading its results into them.
Outputs read_outputs(HostProblem& p);

// A bwd case's dq and dk parts in `o` get Part::terms, from the textbook backward of the case's
// inputs (run_pair does it for the reference side where the tolerance has a term_roundoff).
void attach_gradient_terms(const HostProblem& p, Outputs& o);

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
//
// kernel_vs_reference(): a kernel vs the reference, DESIGN.md's rule in the form the GPU tests
// of tests/gpu use for the whole grid (decode, mla: 4 u vmax, twice what a plain 16-bit
// implementation achieves): each element may also be off by spread * u * max |b| over its part,
// u the unit roundoff of the part's inputs (bf16 2^-8, fp16 2^-11, fp32 2^-17 for the kernels'
// fast exp/log), spread value_spread for out, grad_spread for dq/dk/dv/dsinks (their sums
// cancel); LSE to 1e-3. Both sides are rounded to the output's dtype on their own, so an element
// whose exact value lies near a rounding midpoint may come out one unit in the last place apart
// however small the kernel's error: the rounding allowance is at least `output_ulps` units in the
// last place of the element (a merge of fp32 states into bf16 or fp16 output has almost no
// spread to cover it otherwise; storage_tolerance alone is half an ulp at a binade's bottom).
struct Tolerance {
  double rounding = 1.0;
  double lse_abs = 0.0;
  double value_spread = 0.0;
  double grad_spread = 0.0;
  double output_ulps = 0.0;
  double term_roundoff = 0.0;  // times Part::terms: fp32 accumulation over cancelling terms
  static Tolerance reference_vs_naive() { return {}; }
  // term_roundoff 2^-20, 16 ulps of fp32: one-key gradients whose reference is exactly 0 measured
  // 2^-26 .. 2^-25 of their terms on an H200 (run set q: dk residues up to 1.9e-5, terms ~1300).
  static Tolerance kernel_vs_reference() { return {1.0, 1e-3, 8.0, 16.0, 1.0, 0x1p-20}; }
};

struct Report {
  enum class Kind {
    kPass,
    kMismatch,  // outputs differ (or NaN)
    kRejected,  // an implementation threw hopattn::Error for a case that is valid
    kCrash,     // any other exception
    kAccepted,  // an invalid case (invalid.hpp) went through without an error
    kSkipped,   // an implementation declined the case (Implementation::declines): not a failure
  };
  Kind kind = Kind::kPass;
  std::string detail;  // what differed, or the exception's message
  bool ok() const { return kind == Kind::kPass; }
  bool skipped() const { return kind == Kind::kSkipped; }
};
const char* kind_name(Report::Kind k);

Report compare(const Outputs& a, const Outputs& b, const Tolerance& tol);
Report run_pair(const Case& c, const Implementation& a, const Implementation& b,
                const Tolerance& tol);

}  // namespace hopattn::fuzz
