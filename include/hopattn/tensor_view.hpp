// TensorView: a non-owning view of a strided tensor (data, dtype, shape, strides in elements,
// device). No allocation, no CUDA headers: it is passed by value through every API call.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>

#include "hopattn/dlpack.h"
#include "hopattn/dtype.hpp"

namespace hopattn {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const Device& d);

// cudaStream_t without the CUDA headers (cudaStream_t is `struct CUstream_st*`).
struct CUstream_st;
using Stream = CUstream_st*;

class TensorView {
 public:
  static constexpr int kMaxRank = 6;

  TensorView() = default;
  // Contiguous (row-major) tensor.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = {});
  // Arbitrary strides, in elements.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides, Device device = {});
  TensorView(void* data, DType dtype, int rank, const int64_t* shape, const int64_t* strides,
             Device device = {});

  // Throws hopattn::Error for dtypes or devices hopattn does not handle. `strides == nullptr`
  // (allowed by DLPack for compact tensors) means row-major.
  static TensorView from_dlpack(const DLTensor& t);

  bool defined() const { return rank_ > 0 || data_ != nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }
  int rank() const { return rank_; }
  int64_t size(int dim) const { return shape_[norm(dim)]; }
  int64_t stride(int dim) const { return strides_[norm(dim)]; }
  int64_t numel() const;
  bool is_contiguous() const;
  // Offset in elements of a multi-index (int64 throughout).
  int64_t offset(std::initializer_list<int64_t> index) const;

  std::string shape_string() const;  // "[2, 128, 8, 128]"

 private:
  int norm(int dim) const { return dim < 0 ? dim + rank_ : dim; }
  void set_contiguous_strides();

  void* data_ = nullptr;
  DType dtype_ = DType::kFP32;
  Device device_{};
  int rank_ = 0;
  std::array<int64_t, kMaxRank> shape_{};
  std::array<int64_t, kMaxRank> strides_{};
};

}  // namespace hopattn
