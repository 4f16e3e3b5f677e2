#include "gpu_test_support.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "hopattn/api.hpp"

namespace hopattn::testing {

std::string cuda_device_problem() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // reset the runtime's last-error state for later calls
    return std::string("no CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorString(status);
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  // The kernels are built for sm_90a only: any other device has no image to launch.
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    cudaGetLastError();
    return "no CUDA device: cudaGetDeviceProperties(0) failed";
  }
  if (prop.major != 9) {
    return std::string("no Hopper (sm_90) CUDA device: device 0 is ") + prop.name + ", sm_" +
           std::to_string(prop.major) + std::to_string(prop.minor);
  }
  return {};
}

void DeviceStatusTest::SetUp() {
  const std::string why = cuda_device_problem();
  if (!why.empty()) GTEST_SKIP() << why;
  try {
    check_errors();
  } catch (const Error&) {
  }
}

TestTensor padded_tensor(DType dtype, std::vector<int64_t> shape, int64_t pad) {
  std::vector<int64_t> storage_shape = shape;
  storage_shape.back() += pad;
  TestTensor t(HostTensor(dtype, storage_shape));
  t.storage.fill_bytes(0xff);
  const TensorView s = t.storage.view();
  std::vector<int64_t> strides(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) strides[d] = s.stride(static_cast<int>(d));
  t.view =
      TensorView(s.data(), dtype, static_cast<int>(shape.size()), shape.data(), strides.data());
  return t;
}

TensorView rebase(const TensorView& view, const HostTensor& from, const HostTensor& to) {
  if (!view.defined()) return {};
  const auto offset =
      static_cast<const char*>(view.data()) - static_cast<const char*>(from.view().data());
  std::vector<int64_t> shape(view.rank()), strides(view.rank());
  for (int d = 0; d < view.rank(); ++d) {
    shape[d] = view.size(d);
    strides[d] = view.stride(d);
  }
  return TensorView(static_cast<char*>(to.view().data()) + offset, view.dtype(), view.rank(),
                    shape.data(), strides.data(), view.device());
}

TestTensor same_layout(const TestTensor& t) {
  if (!t.view.defined()) return TestTensor();
  TestTensor copy(HostTensor(t.storage.dtype(), t.storage.shape()));
  copy.view = rebase(t.view, t.storage, copy.storage);
  return copy;
}

void fill_uniform(const TensorView& view, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for_each_offset(view, [&](int64_t offset) { store_element(view, offset, dist(rng)); });
}

TensorView DeviceSet::put(const HostTensor& storage, const TensorView& view) {
  if (!view.defined()) return {};
  const void* key = storage.view().data();
  for (auto& [host, device] : tensors_) {
    if (host == key) return device->mirror(view);
  }
  tensors_.emplace_back(key, std::make_unique<DeviceTensor>(storage));
  return tensors_.back().second->mirror(view);
}

DeviceTensor& DeviceSet::find(const HostTensor& storage) {
  const void* key = storage.view().data();
  for (auto& [host, device] : tensors_) {
    if (host == key) return *device;
  }
  throw Error(ErrorKind::kValue, "DeviceSet: buffer was never put on the device");
}

PagePlan PagePlan::fresh(const std::vector<int32_t>& lens, int page_size) {
  PagePlan plan;
  plan.page_size = page_size;
  plan.pages_of.resize(lens.size());
  for (size_t row = 0; row < lens.size(); ++row) {
    const int64_t pages = (lens[row] + page_size - 1) / page_size;
    for (int64_t i = 0; i < pages; ++i) plan.pages_of[row].push_back(plan.new_page());
  }
  plan.poison_page = plan.new_page();
  return plan;
}

void PagePlan::shuffle(std::mt19937_64& rng) {
  std::vector<int32_t> relabel(num_pages);
  std::iota(relabel.begin(), relabel.end(), 0);
  std::shuffle(relabel.begin(), relabel.end(), rng);
  for (auto& pages : pages_of) {
    for (auto& p : pages) p = relabel[p];
  }
  poison_page = relabel[poison_page];
}

HostTensor PagePlan::block_table() const {
  size_t width = 1;
  for (const auto& pages : pages_of) width = std::max(width, pages.size());
  std::vector<int32_t> values(pages_of.size() * width, poison_page);
  for (size_t row = 0; row < pages_of.size(); ++row) {
    std::copy(pages_of[row].begin(), pages_of[row].end(), values.begin() + row * width);
  }
  return int_tensor(values, {static_cast<int64_t>(pages_of.size()), static_cast<int64_t>(width)});
}

HostTensor PagePlan::csr_indptr() const {
  std::vector<int32_t> indptr{0};
  for (const auto& pages : pages_of) {
    indptr.push_back(indptr.back() + static_cast<int32_t>(pages.size()));
  }
  return int_tensor(indptr);
}

HostTensor PagePlan::csr_indices() const {
  std::vector<int32_t> indices;
  for (const auto& pages : pages_of) indices.insert(indices.end(), pages.begin(), pages.end());
  if (indices.empty()) indices.push_back(poison_page);  // keep a valid, never-read element
  return int_tensor(indices);
}

int64_t pool_offset(const TensorView& pool, KVLayout layout, int64_t page, int64_t slot,
                    int64_t head, int64_t dim) {
  return layout == KVLayout::kNHD ? pool.offset({page, slot, head, dim})
                                  : pool.offset({page, head, slot, dim});
}

namespace {

// Spacing of the representable numbers of `dtype` at magnitude `x`.
double ulp(DType dtype, double x) {
  int man_bits = 23;
  int min_exp = -126;
  if (dtype == DType::kBF16) man_bits = 7;
  if (dtype == DType::kFP16) {
    man_bits = 10;
    min_exp = -14;
  }
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - man_bits);
}

template <typename Tolerance>
Comparison compare(const TensorView& got, const TensorView& want, Tolerance tolerance) {
  const std::vector<double> g = gather(got);
  const std::vector<double> w = gather(want);
  Comparison c;
  c.count = static_cast<int64_t>(w.size());
  if (g.size() != w.size()) {
    c.failures = 1;
    c.first_failure = "shape mismatch: " + got.shape_string() + " vs " + want.shape_string();
    return c;
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (g[i] == w[i]) continue;  // includes -inf == -inf
    ++c.differing;
    const double err = std::fabs(g[i] - w[i]);
    const bool ok = !std::isnan(err) && err <= tolerance(g[i], w[i]);
    if (std::isnan(err) || err > c.max_abs_err) c.max_abs_err = err;
    if (!ok && c.failures++ == 0) {
      std::ostringstream os;
      os << "element " << i << " (row-major in " << want.shape_string() << "): got " << g[i]
         << ", want " << w[i];
      c.first_failure = os.str();
    }
  }
  return c;
}

}  // namespace

std::string Comparison::summary() const {
  std::ostringstream os;
  os << failures << " of " << count << " elements outside tolerance, max abs err " << max_abs_err
     << ", " << differing << " not identical";
  if (!first_failure.empty()) os << "; first: " << first_failure;
  return os.str();
}

Comparison compare_output(const TensorView& got, const TensorView& want) {
  const DType dtype = want.dtype();
  return compare(got, want, [dtype](double g, double w) {
    return ulp(dtype, std::max(std::fabs(g), std::fabs(w))) + 1e-6;
  });
}

Comparison compare_lse(const TensorView& got, const TensorView& want) {
  return compare(got, want, [](double, double) { return 1e-3; });
}

}  // namespace hopattn::testing
