// CPU reference of merging partial attention states. A state (o, lse) over a key subset S is
// o = sum_{j in S} e^{s_j} v_j / Z_S with lse = log Z_S; states over disjoint subsets combine as
// lse = log(sum_k e^{lse_k}) and o = sum_k e^{lse_k - lse} o_k. An empty state (lse = -inf)
// carries zero weight; merging only empty states gives an empty state (o = 0, lse = -inf).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/element_access.hpp"
#include "reference/attend.hpp"
#include "reference/parallel_for.hpp"
#include "reference/reference.hpp"

namespace hopattn::reference {
namespace {

// Merged log-sum-exp of `lse[0..n)`, and each state's weight e^{lse_k - merged}, computed
// relative to the largest lse so that no exponential overflows. A NaN lse poisons the result
// rather than being silently dropped.
double merge_weights(const std::vector<double>& lse, std::vector<double>& weight) {
  const size_t n = lse.size();
  weight.assign(n, 0.0);
  double m = kNegInf;
  for (double l : lse) {
    if (std::isnan(l)) {
      weight.assign(n, l);
      return l;
    }
    m = std::max(m, l);
  }
  if (m == kNegInf) return kNegInf;
  double sum = 0.0;
  for (size_t k = 0; k < n; ++k) {
    weight[k] = std::exp(lse[k] - m);  // exp(-inf) = 0: empty states carry no weight
    sum += weight[k];
  }
  for (size_t k = 0; k < n; ++k) weight[k] /= sum;
  return m + std::log(sum);
}

}  // namespace

void merge_states(const MergeArgs& args) {
  const int64_t tokens = args.o_a.size(0);
  const int64_t heads = args.o_a.size(1);
  const int64_t dim = args.o_a.size(2);
  const TensorView* o[2] = {&args.o_a, &args.o_b};
  const TensorView* l[2] = {&args.lse_a, &args.lse_b};
  parallel_for(tokens, [&](int64_t t) {
    std::vector<double> lse(2), weight;
    for (int64_t h = 0; h < heads; ++h) {
      for (int k = 0; k < 2; ++k) {
        lse[k] = load_element(*l[k], t * l[k]->stride(0) + h * l[k]->stride(1));
      }
      const double merged = merge_weights(lse, weight);
      for (int64_t d = 0; d < dim; ++d) {
        double acc = 0.0;
        for (int k = 0; k < 2; ++k) {
          // Zero weight: skip, so an empty state's o never matters (0 * garbage could be NaN).
          if (weight[k] == 0.0) continue;
          const TensorView& ok = *o[k];
          acc +=
              weight[k] * load_element(ok, t * ok.stride(0) + h * ok.stride(1) + d * ok.stride(2));
        }
        const TensorView& out = args.out;
        store_element(out, t * out.stride(0) + h * out.stride(1) + d * out.stride(2), acc);
      }
      if (args.lse.defined()) {
        store_element(args.lse, t * args.lse.stride(0) + h * args.lse.stride(1), merged);
      }
    }
  });
}

void merge_states_n(const MergeNArgs& args) {
  const TensorView& o = args.o;
  const TensorView& l = args.lse;
  const int64_t tokens = o.size(0);
  const int64_t n = o.size(1);
  const int64_t heads = o.size(2);
  const int64_t dim = o.size(3);
  parallel_for(tokens, [&](int64_t t) {
    std::vector<double> lse(static_cast<size_t>(n)), weight;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t k = 0; k < n; ++k) {
        lse[k] = load_element(l, t * l.stride(0) + k * l.stride(1) + h * l.stride(2));
      }
      const double merged = merge_weights(lse, weight);
      for (int64_t d = 0; d < dim; ++d) {
        double acc = 0.0;
        for (int64_t k = 0; k < n; ++k) {
          if (weight[k] == 0.0) continue;
          acc += weight[k] * load_element(o, t * o.stride(0) + k * o.stride(1) + h * o.stride(2) +
                                                 d * o.stride(3));
        }
        const TensorView& out = args.out;
        store_element(out, t * out.stride(0) + h * out.stride(1) + d * out.stride(2), acc);
      }
      if (args.lse_out.defined()) {
        store_element(args.lse_out, t * args.lse_out.stride(0) + h * args.lse_out.stride(1),
                      merged);
      }
    }
  });
}

}  // namespace hopattn::reference
