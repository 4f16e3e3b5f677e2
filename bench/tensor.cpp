#include "tensor.hpp"

#include <algorithm>
#include <cstring>

#include "common/element_access.hpp"
#include "hopattn/error.hpp"
#include "random_draw.hpp"
#include "reference/parallel_for.hpp"

namespace hopattn::cli {

namespace {

// Encoded bytes of random_draw::kEntries evenly spaced values in [lo, hi).
std::vector<uint8_t> value_table(DType dtype, double lo, double hi) {
  constexpr int kEntries = random_draw::kEntries;
  std::vector<uint8_t> table(static_cast<size_t>(kEntries) * dtype_size(dtype));
  const TensorView table_view(table.data(), dtype, {kEntries});
  for (int i = 0; i < kEntries; ++i) {
    store_element(table_view, i, lo + (hi - lo) * (i + 0.5) / kEntries);
  }
  return table;
}

// n elements at `out` from the table by random_draw's draws, chunk by chunk in parallel: a
// multi-GB cache (B = 128 at 8k keys) took seconds on one core per CLI call, and the values do
// not depend on the core count.
void fill_host(uint8_t* out, const std::vector<uint8_t>& table, int elt, int64_t n, uint64_t seed) {
  using random_draw::kGroupsPerChunk;
  const int64_t groups = (n + 3) / 4;
  reference::parallel_for((groups + kGroupsPerChunk - 1) / kGroupsPerChunk, [&](int64_t c) {
    const int64_t end = std::min(groups, (c + 1) * kGroupsPerChunk);
    for (int64_t g = c * kGroupsPerChunk; g < end; ++g) {
      uint64_t z = random_draw::draw(seed, g);
      for (int64_t i = 4 * g; i < 4 * g + 4 && i < n; ++i, z >>= 16) {
        std::memcpy(out + i * elt, table.data() + (z & 0xffff) * elt, elt);
      }
    }
  });
}

}  // namespace

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

size_t Tensor::bytes() const {
  return defined() ? static_cast<size_t>(numel()) * dtype_size(dtype_) : 0;
}

uint8_t* Tensor::host_for_overwrite() const {
  if (!host_made_) {
    host_.resize(bytes());
    host_made_ = true;
  }
  return host_.data();
}

void Tensor::fill_on_host() const {
  fill_host(host_.data(), value_table(dtype_, fill_.lo, fill_.hi), dtype_size(dtype_), numel(),
            fill_.seed);
}

uint8_t* Tensor::host_bytes() const {
  const bool made = host_made_;
  uint8_t* out = host_for_overwrite();
  if (!made && has_fill_) fill_on_host();
  return out;
}

TensorView Tensor::view(Side side) const {
  if (!defined()) return {};
  Device device;
  void* data = nullptr;
  if (side == Side::kDevice) {
    check(on_device_, ErrorKind::kValue, "Tensor::view", "a tensor copied with to_device()",
          "a host-only tensor");
    data = device_.data();
    device = {DeviceType::kCUDA, 0};
  } else {
    data = host_bytes();
  }
  return TensorView(data, dtype_, static_cast<int>(shape_.size()), shape_.data(), nullptr, device);
}

void Tensor::to_device() {
  if (!defined()) return;
  if (!on_device_) {
    device_ = DeviceMemory(bytes());
    on_device_ = true;
  }
  if (bytes() == 0) return;
  if (host_made_) {
    copy_to_device(device_.data(), host_.data(), bytes());
  } else if (has_fill_) {
    const std::vector<uint8_t> table = value_table(dtype_, fill_.lo, fill_.hi);
    fill_device_random(device_.data(), table.data(), dtype_size(dtype_), numel(), fill_.seed);
  } else {
    fill_device_bytes(device_.data(), 0, bytes());  // the zeros the host would hold
  }
}

void Tensor::from_device() {
  if (on_device_ && bytes() > 0) copy_to_host(host_for_overwrite(), device_.data(), bytes());
}

void Tensor::poison(Side side) {
  if (side == Side::kHost) {
    std::memset(host_for_overwrite(), 0xff, bytes());
  } else if (on_device_ && bytes() > 0) {
    fill_device_bytes(device_.data(), 0xff, bytes());
  }
}

void fill_random(Tensor& t, double lo, double hi, uint64_t seed) {
  if (t.numel() == 0) return;
  t.fill_ = {lo, hi, seed};
  t.has_fill_ = true;
  // Bytes someone may hold a pointer to are filled now; otherwise on first use.
  if (t.host_made_) t.fill_on_host();
}

Tensor int32_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  Tensor t(DType::kInt32, std::move(shape));
  std::memcpy(t.host_data(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

TensorView narrow(const TensorView& t, int dim, int64_t start, int64_t length) {
  std::vector<int64_t> shape(t.rank()), strides(t.rank());
  for (int d = 0; d < t.rank(); ++d) {
    shape[d] = t.size(d);
    strides[d] = t.stride(d);
  }
  shape[dim] = length;
  char* data = static_cast<char*>(t.data()) + start * t.stride(dim) * dtype_size(t.dtype());
  return TensorView(data, t.dtype(), t.rank(), shape.data(), strides.data(), t.device());
}

TensorView restride(const TensorView& t, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  return TensorView(t.data(), t.dtype(), static_cast<int>(shape.size()), shape.data(),
                    strides.data(), t.device());
}

TensorView reshape(const TensorView& t, std::vector<int64_t> shape) {
  return TensorView(t.data(), t.dtype(), static_cast<int>(shape.size()), shape.data(), nullptr,
                    t.device());
}

}  // namespace hopattn::cli
