// Errors of a result against the result it is checked against, and the pass/fail rule of a row.
#pragma once

#include <string>

#include "hopattn/tensor_view.hpp"

namespace hopattn::cli {

struct ErrorStats {
  double max_abs = 0;  // largest |got - want|; equal infinities (-inf lse) count as 0
  double rel_l2 = 0;   // ||got - want|| / ||want|| over the finite elements
  bool finite = true;  // false: NaN, or an infinity the other side does not have
  void merge(const ErrorStats& o);
};

// got vs want: two host views of the same shape (any strides and dtypes).
ErrorStats compare_views(const TensorView& got, const TensorView& want);

// The verdict of one row: `max_err` is the output's largest absolute error.
struct Check {
  double max_err = 0;
  bool ok = true;
  std::string why;  // when !ok
};

// Output: finite, and relative L2 error <= `out_rel_l2` (DESIGN.md: 2e-2 for 8-bit KV; 1e-2 here
// for 16-bit, above the few 1e-3 a bf16 kernel reaches and far below what a wrong index gives).
// LSE: within 1e-3 (DESIGN.md); an undefined lse (bwd) is not checked.
Check judge(const ErrorStats& out, const ErrorStats* lse, double out_rel_l2 = 1e-2);

// judge() of a forward-like result (out and lse, each against the view it is checked against):
// the one verdict the fwd, decode, mla, merge and batch checks give their outputs.
Check judge_out_lse(const TensorView& out, const TensorView& want_out, const TensorView& lse,
                    const TensorView& want_lse, double out_rel_l2 = 1e-2);

}  // namespace hopattn::cli
