#include "tensor.hpp"

#include <algorithm>
#include <cstring>

#include "common/element_access.hpp"
#include "hopattn/error.hpp"
#include "reference/parallel_for.hpp"

namespace hopattn::cli {

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  host_.resize(static_cast<size_t>(numel()) * dtype_size(dtype_));
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

TensorView Tensor::view(Side side) const {
  if (!defined()) return {};
  void* data = const_cast<uint8_t*>(host_.data());
  Device device;
  if (side == Side::kDevice) {
    check(on_device_, ErrorKind::kValue, "Tensor::view", "a tensor copied with to_device()",
          "a host-only tensor");
    data = device_.data();
    device = {DeviceType::kCUDA, 0};
  }
  return TensorView(data, dtype_, static_cast<int>(shape_.size()), shape_.data(), nullptr, device);
}

void Tensor::to_device() {
  if (!defined()) return;
  if (!on_device_) {
    device_ = DeviceMemory(bytes());
    on_device_ = true;
  }
  if (bytes() > 0) copy_to_device(device_.data(), host_.data(), bytes());
}

void Tensor::from_device() {
  if (on_device_ && bytes() > 0) copy_to_host(host_.data(), device_.data(), bytes());
}

void Tensor::poison(Side side) {
  if (side == Side::kHost) {
    std::memset(host_.data(), 0xff, host_.size());
  } else if (on_device_ && bytes() > 0) {
    fill_device_bytes(device_.data(), 0xff, bytes());
  }
}

void fill_random(Tensor& t, double lo, double hi, uint64_t seed) {
  if (t.numel() == 0) return;
  // Encoded bytes of 65536 evenly spaced values in [lo, hi).
  const int elt = dtype_size(t.dtype());
  constexpr int kEntries = 1 << 16;
  std::vector<uint8_t> table(static_cast<size_t>(kEntries) * elt);
  const TensorView table_view(table.data(), t.dtype(), {kEntries});
  for (int i = 0; i < kEntries; ++i) {
    store_element(table_view, i, lo + (hi - lo) * (i + 0.5) / kEntries);
  }
  // splitmix64: four table indices per 64-bit draw. Fixed chunks of elements, each with its own
  // stream (the seed and the chunk index), fill in parallel: a multi-GB cache (B = 128 at 8k
  // keys) took seconds on one core per CLI call, and the values do not depend on the core count.
  constexpr int64_t kChunk = int64_t{1} << 22;  // a multiple of 4
  auto* out = static_cast<uint8_t*>(t.host_data());
  const int64_t n = t.numel();
  reference::parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) {
    uint64_t state =
        (seed + 0x632be59bd9b4e019ull * static_cast<uint64_t>(c + 1)) * 0x9e3779b97f4a7c15ull;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; i += 4) {
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      for (int64_t j = i; j < i + 4 && j < end; ++j, z >>= 16) {
        std::memcpy(out + j * elt, table.data() + (z & 0xffff) * elt, elt);
      }
    }
  });
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
