// Device memory for the GPU tests: an owning buffer, and a device mirror of a HostTensor whose
// views map host views (same offsets, shapes and strides) onto the device copy.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "hopattn/error.hpp"
#include "hopattn/tensor_view.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {

// Throws hopattn::Error (kRuntime) naming the call and the CUDA error.
inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorKind::kRuntime, detail::concat(what, " failed: ", cudaGetErrorName(status),
                                                    ": ", cudaGetErrorString(status)));
  }
}

class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  // Never zero bytes, so even an empty tensor has a distinct valid address.
  explicit DeviceAllocation(size_t bytes) : bytes_(bytes) {
    check_cuda(cudaMalloc(&data_, bytes > 0 ? bytes : 16), "cudaMalloc");
  }
  ~DeviceAllocation() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceAllocation(DeviceAllocation&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceAllocation& operator=(DeviceAllocation&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = o.data_;
      bytes_ = o.bytes_;
      o.data_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The bytes of one HostTensor on the current CUDA device, `front` bytes into their allocation
// (paged pools: 0 puts the pool at the allocation's start, as a framework's cache tensor is).
class DeviceTensor {
 public:
  DeviceTensor() = default;
  explicit DeviceTensor(const HostTensor& host, size_t front = 0)
      : host_base_(static_cast<const char*>(host.view().data())),
        bytes_(static_cast<size_t>(host.numel()) * dtype_size(host.dtype())),
        front_(front),
        buffer_(front + bytes_) {
    upload(host);
  }

  // The device view of `host_view`, which must point into the mirrored HostTensor's memory.
  TensorView mirror(const TensorView& host_view) const {
    if (!host_view.defined()) return {};
    const auto offset = static_cast<const char*>(host_view.data()) - host_base_;
    int64_t shape[TensorView::kMaxRank];
    int64_t strides[TensorView::kMaxRank];
    for (int d = 0; d < host_view.rank(); ++d) {
      shape[d] = host_view.size(d);
      strides[d] = host_view.stride(d);
    }
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    return TensorView(data() + offset, host_view.dtype(), host_view.rank(), shape, strides,
                      Device{DeviceType::kCUDA, device});
  }

  void upload(const HostTensor& host) {
    check_cuda(cudaMemcpy(data(), host.view().data(), bytes_, cudaMemcpyHostToDevice),
               "cudaMemcpy(host to device)");
  }
  void download(HostTensor& host) const {
    check_cuda(cudaMemcpy(host.data(), data(), bytes_, cudaMemcpyDeviceToHost),
               "cudaMemcpy(device to host)");
  }
  // Every byte 0xff: NaN in bf16/fp16/fp32, so an element the kernel never wrote fails.
  void poison() { check_cuda(cudaMemset(data(), 0xff, bytes_), "cudaMemset"); }

 private:
  char* data() const { return static_cast<char*>(buffer_.data()) + front_; }

  const char* host_base_ = nullptr;
  size_t bytes_ = 0;
  size_t front_ = 0;
  DeviceAllocation buffer_;
};

}  // namespace hopattn::testing
