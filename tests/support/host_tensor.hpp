// Test helpers: an owning host tensor, seeded random fills, and error metrics.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "common/element_access.hpp"
#include "hopattn/tensor_view.hpp"

namespace hopattn::testing {

// Owns contiguous host memory and hands out a TensorView over it.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape);
  // Moves keep the heap buffer (and so the view) in place; copies would leave the view dangling.
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  TensorView view() const { return view_; }
  operator TensorView() const { return view_; }  // NOLINT: a view of owned data
  DType dtype() const { return view_.dtype(); }
  int64_t numel() const { return view_.numel(); }
  const std::vector<int64_t>& shape() const { return shape_; }
  void* data() { return bytes_.data(); }

  // Element access by flat (contiguous) index, converted through double.
  double get(int64_t i) const { return load_element(view_, i); }
  void set(int64_t i, double v) { store_element(view_, i, v); }
  std::vector<double> to_double() const;

  // Fills with uniform values in [lo, hi) (integers round), rounded into the dtype.
  void fill_uniform(std::mt19937_64& rng, double lo, double hi);
  // Fills every byte with `byte` (e.g. 0xff: NaN for bf16/fp16/fp32, the "poison" pattern).
  void fill_bytes(uint8_t byte);

 private:
  std::vector<int64_t> shape_;
  std::vector<uint8_t> bytes_;
  TensorView view_;
};

// Calls fn(offset) for every element of the view, in row-major order of its logical index.
template <typename Fn>
void for_each_offset(const TensorView& t, Fn fn) {
  if (t.numel() == 0) return;
  std::vector<int64_t> index(t.rank(), 0);
  while (true) {
    int64_t offset = 0;
    for (int d = 0; d < t.rank(); ++d) offset += index[d] * t.stride(d);
    fn(offset);
    int d = t.rank() - 1;
    for (; d >= 0; --d) {
      if (++index[d] < t.size(d)) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// The elements of a (possibly strided) host view in row-major order, as double.
std::vector<double> gather(const TensorView& t);

// int32 tensor from values (cu_seqlens, kv_lens, page tables).
HostTensor int_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape = {});

// Seed for a test: HOPATTN_SEED from the environment, else fresh from the clock. Print it with
// SCOPED_TRACE(seed_trace(seed)) so a failure names the seed that reproduces it.
uint64_t test_seed();
std::string seed_trace(uint64_t seed);

// max |a - b| and ||a - b|| / ||b||; NaN anywhere makes both NaN (so comparisons fail).
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
double rel_l2(const std::vector<double>& a, const std::vector<double>& b);
bool all_finite(const std::vector<double>& a);

}  // namespace hopattn::testing
