// The CLI's tensors: contiguous host memory plus, once uploaded, a device copy; views of either
// side for the API calls; fast random fills for model-sized inputs; views of sub-blocks.
//
// The host bytes are made when first asked for: a tensor filled by fill_random and uploaded
// before anything on the host reads it gets its values written on the device instead (the same
// bytes), so a timing-only run (`--no-check`) of a multi-GB cache skips the host copy, its fill
// and the upload (seconds a CLI call). A later host read still sees those values.
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
  size_t bytes() const;
  void* host_data() { return host_bytes(); }
  const void* host_data() const { return host_bytes(); }

  // The whole tensor on one side (undefined view for an undefined tensor). The device side
  // exists after to_device().
  TensorView view(Side side) const;
  TensorView host() const { return view(Side::kHost); }

  // Allocates the device copy once, then uploads the host bytes (or, where the host has made
  // none since a fill_random, writes that fill on the device).
  void to_device();
  void from_device();  // downloads the device copy into the host bytes
  // Every byte 0xff (NaN in bf16/fp16/fp32): an element nobody writes shows up in the check.
  void poison(Side side);

 private:
  friend void fill_random(Tensor& t, double lo, double hi, uint64_t seed);
  struct Fill {
    double lo = 0, hi = 0;
    uint64_t seed = 0;
  };
  // The host bytes, made (zeros, or the pending fill) on first use.
  uint8_t* host_bytes() const;
  // The host buffer for bytes about to be overwritten whole (no pending fill applied).
  uint8_t* host_for_overwrite() const;
  // fill_ written into the host buffer (which exists).
  void fill_on_host() const;

  DType dtype_ = DType::kFP32;
  std::vector<int64_t> shape_;
  mutable std::vector<uint8_t> host_;
  mutable bool host_made_ = false;
  bool has_fill_ = false;  // a fill_random not yet written on the host
  Fill fill_;
  DeviceMemory device_;
  bool on_device_ = false;
};

// Uniform values in [lo, hi) rounded into the dtype, from a 65536-entry table of encoded values
// (random_draw.hpp; a few ns an element on the host, so model-sized caches fill in a second or
// so). Written on the host when its bytes exist already, else when they are first read, or on
// the device by to_device() if that comes first.
void fill_random(Tensor& t, double lo, double hi, uint64_t seed);
Tensor int32_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape = {});

// `t` restricted to [start, start + length) along `dim` (same strides; offset data pointer).
TensorView narrow(const TensorView& t, int dim, int64_t start, int64_t length);
// A view with the same data pointer and dtype and the given shape and strides.
TensorView restride(const TensorView& t, std::vector<int64_t> shape, std::vector<int64_t> strides);
// A contiguous tensor's view with another shape of the same element count.
TensorView reshape(const TensorView& t, std::vector<int64_t> shape);

}  // namespace hopattn::cli
