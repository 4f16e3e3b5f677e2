// Shared pieces of the GPU tests: skipping cleanly without a device, paged-KV construction on the
// host, and the comparison of GPU outputs with the CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_buffer.hpp"
#include "hopattn/options.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {

// Empty when a Hopper CUDA device is usable; otherwise why not ("no CUDA device: ...").
std::string cuda_device_problem();

// Parametrized GPU test: every test skips with the reason where there is no usable device.
template <typename Param>
class GpuTestWithParam : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const std::string why = cuda_device_problem();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

// A test of the device status word (the safety contract): skips without a usable device, and
// starts with no record (one left by an earlier test is not this test's).
class DeviceStatusTest : public ::testing::Test {
 protected:
  void SetUp() override;
};

// Host storage plus the view a test passes: the whole storage, or a strided view into it (padded
// rows leave gaps that nothing may read or write). Undefined view = tensor absent.
struct TestTensor {
  HostTensor storage;
  TensorView view;
  TestTensor() = default;
  explicit TestTensor(HostTensor t) : storage(std::move(t)), view(storage.view()) {}
};

// A tensor of `shape` whose rows (last dim) are padded by `pad` elements filled with 0xff bytes.
TestTensor padded_tensor(DType dtype, std::vector<int64_t> shape, int64_t pad);
// `view` (a view into `from`) moved onto `to`, a buffer of the same size: same offset and strides.
TensorView rebase(const TensorView& view, const HostTensor& from, const HostTensor& to);
// Fresh storage of the same size with the same view into it (for a second copy of an output).
TestTensor same_layout(const TestTensor& t);
// Uniform values in [lo, hi) (rounded into the dtype) for every element of the view.
void fill_uniform(const TensorView& view, std::mt19937_64& rng, double lo, double hi);

// Device copies of host buffers, each uploaded once and looked up by its host storage.
class DeviceSet {
 public:
  // The device view mirroring `view`, a view into `storage` (uploaded on first use).
  // An undefined view (an absent optional tensor) gives an undefined view.
  TensorView put(const HostTensor& storage, const TensorView& view);
  TensorView put(const TestTensor& t) { return put(t.storage, t.view); }
  // Fills the device copy of `storage` with 0xff bytes.
  void poison(const HostTensor& storage) { find(storage).poison(); }
  // Copies the device copy of `storage` into `dest` (a buffer of the same size).
  void download(const HostTensor& storage, HostTensor& dest) { find(storage).download(dest); }

 private:
  DeviceTensor& find(const HostTensor& storage);
  std::vector<std::pair<const void*, std::unique_ptr<DeviceTensor>>> tensors_;
};

// Physical pages of each page-table row. Rows may share pages (beams); `poison_page` is a page
// no row uses, the target of every unused block-table entry.
struct PagePlan {
  int page_size = 1;
  int32_t num_pages = 0;
  int32_t poison_page = 0;
  std::vector<std::vector<int32_t>> pages_of;

  int32_t new_page() { return num_pages++; }
  // Fresh pages for every row, enough for its length; plus the poison page.
  static PagePlan fresh(const std::vector<int32_t>& lens, int page_size);
  // Relabels pages by a random permutation, so logical order never matches physical order.
  void shuffle(std::mt19937_64& rng);
  int32_t page(int64_t row, int64_t token) const { return pages_of[row][token / page_size]; }
  HostTensor block_table() const;  // int32 [rows, max(1, max pages)]
  HostTensor csr_indptr() const;   // int32 [rows + 1]
  HostTensor csr_indices() const;  // int32 [total pages listed]
};

// Element offset of (page, slot, head, dim) in a pool [P, ps, H, D] (NHD) or [P, H, ps, D] (HND).
int64_t pool_offset(const TensorView& pool, KVLayout layout, int64_t page, int64_t slot,
                    int64_t head, int64_t dim);

// Result of comparing a GPU output with the reference's, element by element.
struct Comparison {
  int64_t count = 0;
  int64_t failures = 0;   // outside the tolerance, or NaN on either side
  int64_t differing = 0;  // not bit-identical (after conversion to double)
  double max_abs_err = 0;
  std::string first_failure;
  double differing_fraction() const { return count ? double(differing) / count : 0.0; }
  std::string summary() const;
};

// Attention output in a 16-bit (or fp32) dtype. Both sides compute the same real number and round
// it to the output dtype independently, so they may land one unit in the last place apart where
// the exact value sits near a rounding boundary; never further. Tolerance: one ulp of the dtype at
// the larger magnitude of the two, plus 1e-6 absolute for values near zero.
Comparison compare_output(const TensorView& got, const TensorView& want);

// LSE (fp32, natural log): |got - want| <= 1e-3 (DESIGN.md); -inf must match -inf exactly.
Comparison compare_lse(const TensorView& got, const TensorView& want);

}  // namespace hopattn::testing
