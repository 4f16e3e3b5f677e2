// Helpers of the Hopper GPU tests: skip without a suitable device, owning device buffers, and a
// synchronization that turns a hung kernel into a test failure with a message (the process then
// exits, since a hung context cannot be recovered) instead of a silent timeout of the whole run.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hopattn::testing::hopper {

// Empty when the tests can run; otherwise why not (used as GTEST_SKIP() << reason).
inline std::string gpu_skip_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return "no CUDA device";
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "no CUDA device";
  if (prop.major != 9) {
    return "needs a Hopper GPU (sm_90a); device 0 is sm_" + std::to_string(prop.major) +
           std::to_string(prop.minor);
  }
  return "";
}

inline void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
  }
}

// Waits for `stream` for at most `seconds`. A kernel still running by then is reported and the
// process exits: the device cannot be used again by this process, and the output so far (which
// names the test) is what the run needs.
inline void sync_or_die(cudaStream_t stream, const char* what, double seconds = 120.0) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t err = cudaStreamQuery(stream);
    if (err == cudaSuccess) return;
    if (err != cudaErrorNotReady) cuda_check(err, what);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > seconds) {
      std::fprintf(stderr, "FATAL: %s still running after %.0f s: treating as a hang, exiting\n",
                   what, waited);
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Owning device allocation of `count` elements of T.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    cuda_check(cudaMalloc(&ptr_, count * sizeof(T) + 16), "cudaMalloc");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) (void)cudaFree(ptr_);
  }

  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    cuda_check(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
               "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    cuda_check(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  void fill_bytes(int byte) { cuda_check(cudaMemset(ptr_, byte, bytes()), "memset"); }

 private:
  void* ptr_ = nullptr;
  size_t count_ = 0;
};

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> buf(host.size());
  buf.upload(host);
  return buf;
}

}  // namespace hopattn::testing::hopper
