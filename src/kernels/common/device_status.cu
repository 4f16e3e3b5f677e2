// The device status word and its host side (device_status_host.hpp).
#include <cuda_runtime.h>

#include <atomic>

#include "kernels/common/cuda_host.hpp"
#include "kernels/common/device_cache.hpp"
#include "kernels/common/device_status_host.hpp"

namespace hopattn::kernels {
namespace {

// One per device (each device holds its own copy of a module's globals).
__device__ DeviceStatus g_device_status;

PerDeviceCache<DeviceStatus*> g_status_address;
// Whether any launch asked for a status word: before that nothing can have been recorded, and
// check_errors returns without a CUDA call (so it also runs where there is no device).
std::atomic<bool> g_launched{false};

void check_not_capturing(cudaStream_t stream, const char* where, const char* what) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  throw_if_cuda_error(cudaStreamIsCapturing(stream, &capture), where, "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) {
    throw Error(ErrorKind::kValue,
                detail::concat(where,
                               ": stream: expected a stream that is not capturing a CUDA "
                               "graph (",
                               what, " synchronizes it), got a capturing stream"));
  }
}

int device_of(cudaStream_t stream, const char* where) {
  int device = 0;
  throw_if_cuda_error(cudaStreamGetDevice(stream, &device), where, "cudaStreamGetDevice");
  return device;
}

}  // namespace

DeviceStatus* device_status(int device, const char* where) {
  return g_status_address.get(device, [&] {
    DeviceGuard guard(device, where);
    void* address = nullptr;
    throw_if_cuda_error(cudaGetSymbolAddress(&address, g_device_status), where,
                        "cudaGetSymbolAddress(device status)");
    g_launched.store(true, std::memory_order_relaxed);
    return static_cast<DeviceStatus*>(address);
  });
}

void check_device_status(Stream stream) {
  constexpr const char* kWhere = "hopattn.check_errors";
  if (!g_launched.load(std::memory_order_relaxed)) return;
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  check_not_capturing(s, kWhere, "check_errors");
  const int device = device_of(s, kWhere);
  DeviceStatus* word = device_status(device, kWhere);
  DeviceGuard guard(device, kWhere);
  DeviceStatus seen{};
  throw_if_cuda_error(cudaMemcpyAsync(&seen, word, sizeof(seen), cudaMemcpyDeviceToHost, s), kWhere,
                      "cudaMemcpyAsync(device status)");
  // Also reports a kernel fault of the stream's earlier work (a sticky error).
  throw_if_cuda_error(cudaStreamSynchronize(s), kWhere, "cudaStreamSynchronize");
  if (seen.tag == 0u) return;
  // Cleared in stream order: kernels queued after this call record afresh.
  throw_if_cuda_error(cudaMemsetAsync(word, 0, sizeof(DeviceStatus), s), kWhere,
                      "cudaMemsetAsync(device status)");
  throw Error(ErrorKind::kDeviceIndex, describe_status(seen));
}

void copy_to_host(void* dst, const void* src, size_t bytes, int device, Stream stream,
                  const char* where) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  check_not_capturing(s, where, "debug mode");
  DeviceGuard guard(device, where);
  throw_if_cuda_error(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), where,
                      "cudaMemcpyAsync (debug mode: index arrays to the host)");
  throw_if_cuda_error(cudaStreamSynchronize(s), where, "cudaStreamSynchronize (debug mode)");
}

}  // namespace hopattn::kernels
