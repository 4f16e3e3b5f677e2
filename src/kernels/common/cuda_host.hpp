// Host-side CUDA helpers shared by every kernel family's launch code: error checks that throw
// hopattn::Error, a current-device guard, and the cached SM count. The library reads no
// environment: launch variants are explicit options (kernels/*/launch.hpp).
#pragma once

#include <cuda_runtime.h>

#include "hopattn/error.hpp"
#include "kernels/common/device_cache.hpp"

namespace hopattn::kernels {

// Throws kRuntime "<where>: <what> failed: <error name>: <error string>" unless `status` is
// cudaSuccess. `where` names the public entry point ("hopattn.decode").
inline void throw_if_cuda_error(cudaError_t status, const char* where, const char* what) {
  if (status != cudaSuccess) {
    // Clear the runtime's last error (a sticky one stays regardless): a failure reported here as
    // an exception must not surface again in the caller's next CUDA call (a framework's).
    (void)cudaGetLastError();
    throw Error(ErrorKind::kRuntime,
                detail::concat(where, ": ", what, " failed: ", cudaGetErrorName(status), ": ",
                               cudaGetErrorString(status)));
  }
}

// Makes `device` (the tensors' device, not necessarily the caller's current one) current for the
// scope and restores the caller's device on exit.
class DeviceGuard {
 public:
  DeviceGuard(int device, const char* where) {
    throw_if_cuda_error(cudaGetDevice(&previous_), where, "cudaGetDevice");
    if (previous_ != device) throw_if_cuda_error(cudaSetDevice(device), where, "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Attribute kAttr of `device`, queried once per device (an attribute read; no synchronization).
template <cudaDeviceAttr kAttr>
int cached_device_attribute(int device, const char* where, const char* what) {
  static PerDeviceCache<> cache;
  return cache.get(device, [&] {
    int n = 0;
    throw_if_cuda_error(cudaDeviceGetAttribute(&n, kAttr, device), where, what);
    return n;
  });
}

// SM count of `device`.
inline int sm_count(int device, const char* where) {
  return cached_device_attribute<cudaDevAttrMultiProcessorCount>(
      device, where, "cudaDeviceGetAttribute(multiProcessorCount)");
}

// L2 size of `device` in bytes.
inline int l2_cache_bytes(int device, const char* where) {
  return cached_device_attribute<cudaDevAttrL2CacheSize>(device, where,
                                                         "cudaDeviceGetAttribute(l2CacheSize)");
}

}  // namespace hopattn::kernels
