// device.hpp in a build without CUDA: no GPU is usable, and nothing else may be called.
#ifndef HOPATTN_WITH_CUDA

#include "device.hpp"
#include "hopattn/error.hpp"

namespace hopattn::cli {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw Error(ErrorKind::kNotImplemented,
              std::string(what) + ": this hopattn was built without CUDA (no GPU support)");
}

}  // namespace

const GpuInfo& gpu_info() {
#ifdef HOPATTN_CLI_NO_GPU_AT_CONFIGURE
  // HOPATTN_CUDA=IF_GPU (the demo preset) found a toolkit but no GPU, so it built no kernels.
  static const GpuInfo info{false, "", "no GPU found (so this build has no GPU kernels)"};
#else
  static const GpuInfo info{false, "", "built without CUDA"};
#endif
  return info;
}

DeviceMemory::DeviceMemory(size_t) { no_cuda("DeviceMemory"); }
DeviceMemory::~DeviceMemory() = default;
DeviceMemory::DeviceMemory(DeviceMemory&&) noexcept = default;
DeviceMemory& DeviceMemory::operator=(DeviceMemory&&) noexcept = default;
void copy_to_device(void*, const void*, size_t) { no_cuda("copy_to_device"); }
void copy_to_host(void*, const void*, size_t) { no_cuda("copy_to_host"); }
void fill_device_bytes(void*, int, size_t) { no_cuda("fill_device_bytes"); }
void fill_device_random(void*, const void*, int, int64_t, uint64_t) {
  no_cuda("fill_device_random");
}
void device_synchronize() { no_cuda("device_synchronize"); }
void flush_l2(L2Flush) { no_cuda("flush_l2"); }
SmHold::SmHold(const SmHoldSpec&) { no_cuda("SmHold"); }
SmHold::~SmHold() = default;
void SmHold::hold() { no_cuda("SmHold::hold"); }
void SmHold::release() { no_cuda("SmHold::release"); }
GpuTimer::GpuTimer() { no_cuda("GpuTimer"); }
GpuTimer::~GpuTimer() = default;
void GpuTimer::start() { no_cuda("GpuTimer"); }
double GpuTimer::stop_ms() { no_cuda("GpuTimer"); }
void naive_fwd(const FwdArgs&, const AttentionOptions&) { no_cuda("naive_fwd"); }
void naive_decode(const DecodeArgs&, const DecodeOptions&) { no_cuda("naive_decode"); }

}  // namespace hopattn::cli

#endif  // !HOPATTN_WITH_CUDA
