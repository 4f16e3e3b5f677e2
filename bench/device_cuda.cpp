// CUDA implementation of device.hpp (compiled into CUDA builds only).
#ifdef HOPATTN_WITH_CUDA

#include <cuda_runtime.h>

#include <utility>

#include "cuda_check.hpp"
#include "device.hpp"
#include "hopattn/error.hpp"
#include "naive_gpu/naive_attention.hpp"

namespace hopattn::cli {
namespace {

GpuInfo query() {
  GpuInfo info;
  // No driver at all: cudaGetDeviceCount would report an "insufficient driver" that is no news.
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    info.why_not = "no GPU found";
    return info;
  }
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
    cudaGetLastError();  // leave no error behind for later calls
    info.why_not = "no GPU found";
    return info;
  }
  if (status != cudaSuccess) {  // a driver and a failure worth quoting (too old, busy, ...)
    cudaGetLastError();
    info.why_not = std::string("no usable GPU (") + cudaGetErrorString(status) + ")";
    return info;
  }
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  info.name = prop.name;
  if (prop.major != 9) {
    info.why_not = detail::concat(prop.name, " is sm_", prop.major, prop.minor,
                                  "; the kernels are built for sm_90a (Hopper) only");
    return info;
  }
  info.usable = true;
  return info;
}

}  // namespace

const GpuInfo& gpu_info() {
  static const GpuInfo info = query();
  return info;
}

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
  // Never zero bytes: an empty tensor still gets a valid, distinct address.
  check_cuda(cudaMalloc(&data_, bytes > 0 ? bytes : 256), "cudaMalloc");
}

DeviceMemory::~DeviceMemory() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceMemory::DeviceMemory(DeviceMemory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(host to device)");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(device to host)");
}

void fill_device_bytes(void* dst, int byte, size_t bytes) {
  check_cuda(cudaMemset(dst, byte, bytes), "cudaMemset");
}

void device_synchronize() { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

GpuTimer::GpuTimer() {
  cudaEvent_t a = nullptr, b = nullptr;
  check_cuda(cudaEventCreate(&a), "cudaEventCreate");
  check_cuda(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}

GpuTimer::~GpuTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void GpuTimer::start() {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(start_), nullptr), "cudaEventRecord");
}

double GpuTimer::stop_ms() {
  auto* stop = static_cast<cudaEvent_t>(stop_);
  check_cuda(cudaEventRecord(stop, nullptr), "cudaEventRecord");
  check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0.f;
  check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), stop),
             "cudaEventElapsedTime");
  return ms;
}

void naive_fwd(const FwdArgs& args, const AttentionOptions& opts) {
  naive::naive_attention_fwd(args, opts, nullptr);
}

void naive_decode(const DecodeArgs& args, const DecodeOptions& opts) {
  naive::naive_decode(args, opts, nullptr);
}

}  // namespace hopattn::cli

#endif  // HOPATTN_WITH_CUDA
