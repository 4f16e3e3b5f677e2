// The writer of an input that a programmatic dependent launch (kernels/common/
// programmatic_launch.cuh) must wait for: a kernel that lets the launch behind it start at once,
// spins, and only then writes the input. A dependent that read anything before
// ptx::wait_for_prior_grids() would see the poison still in place.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

#include "device_buffer.hpp"

namespace hopattn::testing {

// Launches, on `stream`, one CTA that allows dependent launches, spins for `cycles` and then
// copies `bytes` from src to dst.
void launch_late_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream,
                      long long cycles = 2'000'000);

// `bytes` of device memory at `data`, saved at construction; rewrite_late() poisons them (0xff:
// NaN in every float type) and has a late copy on `stream` write them back.
class LateInput {
 public:
  LateInput(void* data, size_t bytes) : data_(data), saved_(bytes) {
    check_cuda(cudaMemcpy(saved_.data(), data, bytes, cudaMemcpyDeviceToDevice), "save input");
  }
  void rewrite_late(cudaStream_t stream) {
    check_cuda(cudaMemset(data_, 0xff, saved_.bytes()), "poison input");
    check_cuda(cudaDeviceSynchronize(), "poison input");
    launch_late_copy(data_, saved_.data(), saved_.bytes(), stream);
  }

 private:
  void* data_;
  DeviceAllocation saved_;
};

// One output of a call behind rewrite_late() against the same output of the call with its input in
// place: no NaN (a read before the wait would have seen the poison) and bitwise the same.
inline void expect_as_in_place(HostTensor& want, HostTensor& got, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.numel(), want.numel()) << what;
  int64_t nan = 0;
  for (int64_t i = 0; i < got.numel(); ++i) nan += std::isnan(got.get(i)) ? 1 : 0;
  EXPECT_EQ(nan, 0) << what
                    << " holds NaN: the kernel read its input before the kernel ahead wrote it";
  EXPECT_EQ(std::memcmp(want.data(), got.data(), size_t(got.numel()) * dtype_size(got.dtype())), 0)
      << what << " differs from the call with its input in place";
}

}  // namespace hopattn::testing
