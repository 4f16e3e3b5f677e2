// Validation of merge_states (two partial attention states) and merge_states_n (n of them).
#include "api/validate.hpp"
#include "api/validate_common.hpp"

namespace hopattn::validate {
namespace {

// Partial outputs are often kept in fp32 (split-KV) and merged into a 16-bit output, so every
// float type is accepted on every device.
DTypes state_dtypes() { return DTypes({DType::kBF16, DType::kFP16, DType::kFP32}); }

}  // namespace

void merge_states(const MergeArgs& a) {
  const Checker c("merge_states", a.o_a, "o_a");
  c.same_device(a.o_a, "o_a");
  c.dtype(a.o_a, "o_a", state_dtypes());
  c.rank(a.o_a, "o_a", 3, "[T, H, D]");
  const Shape o_shape = Shape::of(a.o_a);
  const Shape lse_shape = o_shape.without_last();
  const DTypes fp32({DType::kFP32});
  c.tensor(a.lse_a, "lse_a", fp32, lse_shape, "[T, H] of o_a");
  c.tensor(a.o_b, "o_b", DTypes({a.o_a.dtype()}, "o_a's dtype"), o_shape, "o_a's shape");
  c.tensor(a.lse_b, "lse_b", fp32, lse_shape, "[T, H] of o_a");
  c.tensor(a.out, "out", state_dtypes(), o_shape, "o_a's shape");
  c.tensor(a.lse, "lse", fp32, lse_shape, "[T, H] of o_a");
  c.tma_layout(a.o_a, "o_a");
  c.tma_layout(a.o_b, "o_b");
  c.tma_layout(a.out, "out");
  // In-place merging (out = o_a) is not supported: an output never aliases an input.
  c.outputs_disjoint({{&a.out, "out"}, {&a.lse, "lse"}},
                     {{&a.o_a, "o_a"}, {&a.lse_a, "lse_a"}, {&a.o_b, "o_b"}, {&a.lse_b, "lse_b"}});
}

void merge_states_n(const MergeNArgs& a) {
  const Checker c("merge_states_n", a.o, "o");
  c.same_device(a.o, "o");
  c.dtype(a.o, "o", state_dtypes());
  c.rank(a.o, "o", 4, "[T, n, H, D]");
  const int64_t tokens = a.o.size(0), n = a.o.size(1), heads = a.o.size(2), d = a.o.size(3);
  c.require(n >= 1, ErrorKind::kValue, "o", "n >= 1 states", n);
  const DTypes fp32({DType::kFP32});
  c.tensor(a.lse, "lse", fp32, {tokens, n, heads}, "[T, n, H] of o");
  c.tensor(a.out, "out", state_dtypes(), {tokens, heads, d}, "[T, H, D] of o");
  c.tensor(a.lse_out, "lse_out", fp32, {tokens, heads}, "[T, H] of o");
  c.tma_layout(a.o, "o");
  c.tma_layout(a.out, "out");
  c.outputs_disjoint({{&a.out, "out"}, {&a.lse_out, "lse_out"}}, {{&a.o, "o"}, {&a.lse, "lse"}});
}

}  // namespace hopattn::validate
