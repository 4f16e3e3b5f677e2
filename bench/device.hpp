// The CLI's view of the GPU, without CUDA headers: whether one is usable, device memory, copies,
// event timing and an L2 flush, and the naive GPU reference. device_cuda.cpp implements it in
// CUDA builds; device_none.cpp in CPU-only builds (no GPU, and every other call throws).
// Failures raise hopattn::Error of kind kRuntime with the CUDA error string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hopattn/options.hpp"
#include "l2_flush.hpp"
#include "sm_hold_spec.hpp"

namespace hopattn::cli {

struct GpuInfo {
  bool usable = false;
  std::string name;     // "NVIDIA H200"
  std::string why_not;  // when !usable: "built without CUDA", "no GPU found", ...
};

// Device 0, queried once. Usable means a Hopper (sm_90) device: the kernels are sm_90a only.
const GpuInfo& gpu_info();

class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& o) noexcept;
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void fill_device_bytes(void* dst, int byte, size_t bytes);
// n elements of elt_bytes (1, 2 or 4) at dst, element i the entry of `host_table`
// (random_draw::kEntries of them) that random_draw.hpp's draws give it: the host fill's bytes
// (tensor.cpp, fill_random), made on the device.
void fill_device_random(void* dst, const void* host_table, int elt_bytes, int64_t n, uint64_t seed);
// Waits for all work on the device; raises any error a kernel left behind.
void device_synchronize();
// Empties the L2 as `how` says (l2_flush.hpp), so the next timed call reads its inputs from HBM.
void flush_l2(L2Flush how);

// Holds SMs of the card around each timed call as `spec` says (--hold-sms K: K of them, 1 .. SMs
// - 1; --free-sms LIST: all but those): hold() parks a CTA on each on a stream of its own and
// waits on the default stream until all are resident; release() lets them go after the call.
// Timing only: device_hold.cu says how.
class SmHold {
 public:
  explicit SmHold(const SmHoldSpec& spec);
  ~SmHold();
  SmHold(const SmHold&) = delete;
  SmHold& operator=(const SmHold&) = delete;
  void hold();
  void release();

 private:
  int sms_ = 0;    // SMs held
  int grid_ = 0;   // holder CTAs launched (twice the SMs with a free list: device_hold.cu)
  int count_ = 0;  // the card's SMs
  int shared_ = 0;
  unsigned generation_ = 0;
  void* stream_ = nullptr;
  DeviceMemory words_;
};

// Times one region of the default stream with CUDA events.
class GpuTimer {
 public:
  GpuTimer();
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;
  void start();
  // Records the end, waits for it, and returns the milliseconds since start().
  double stop_ms();

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

// The naive fp32 GPU reference (tests/naive_gpu) on CUDA tensors.
void naive_fwd(const FwdArgs& args, const AttentionOptions& opts);
void naive_decode(const DecodeArgs& args, const DecodeOptions& opts);

}  // namespace hopattn::cli
