// The CLI's tensors: contiguous host memory plus, once uploaded, a device copy; views of either
// side for the API calls; fast random fills for model-sized inputs; views of sub-blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "device.hpp"
#include "hopattn/tensor_view.hpp"

namespace hopattn::cli {

enum class Side { kHost, kDevice };

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);

  bool defined() const { return !shape_.empty(); }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  size_t bytes() const { return host_.size(); }
  void* host_data() { return host_.data(); }
  const void* host_data() const { return host_.data(); }

  // The whole tensor on one side (undefined view for an undefined tensor). The device side
  // exists after to_device().
  TensorView view(Side side) const;
  TensorView host() const { return view(Side::kHost); }

  void to_device();    // allocates the device copy once, then uploads the host bytes
  void from_device();  // downloads the device copy into the host bytes
  // Every byte 0xff (NaN in bf16/fp16/fp32): an element nobody writes shows up in the check.
  void poison(Side side);

 private:
  DType dtype_ = DType::kFP32;
  std::vector<int64_t> shape_;
  std::vector<uint8_t> host_;
  DeviceMemory device_;
  bool on_device_ = false;
};

// Uniform values in [lo, hi) rounded into the dtype, from a 65536-entry table of encoded values
// (a few ns an element, so model-sized caches fill in a second or so).
void fill_random(Tensor& t, double lo, double hi, uint64_t seed);
Tensor int32_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape = {});

// `t` restricted to [start, start + length) along `dim` (same strides; offset data pointer).
TensorView narrow(const TensorView& t, int dim, int64_t start, int64_t length);
// A view with the same data pointer and dtype and the given shape and strides.
TensorView restride(const TensorView& t, std::vector<int64_t> shape, std::vector<int64_t> strides);
// A contiguous tensor's view with another shape of the same element count.
TensorView reshape(const TensorView& t, std::vector<int64_t> shape);

}  // namespace hopattn::cli
