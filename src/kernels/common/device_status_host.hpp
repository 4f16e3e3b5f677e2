// Host side of the device status word (src/common/device_status.hpp) and of debug mode's copies
// of device-resident index arrays. Includable without CUDA headers; defined in CUDA builds only
// (device_status.cu).
#pragma once

#include <cstddef>

#include "common/device_status.hpp"
#include "hopattn/tensor_view.hpp"

namespace hopattn::kernels {

// The status word of `device`: a __device__ variable of the library (one per device, zero when
// the module loads), so nothing is allocated, ever. Its address is looked up on the first launch
// on each device and cached; that lookup is an ordinary runtime call, legal during a CUDA graph
// capture (the captured kernels then write the same word on every replay).
DeviceStatus* device_status(int device, const char* where);

// hopattn::check_errors: orders a read of the status word of `stream`'s device after the
// stream's work, synchronizes the stream (the one sync), and throws hopattn::Error (kDeviceIndex)
// describing the recorded violation, clearing the word first. Throws kValue while `stream` is
// capturing a CUDA graph (a sync there would invalidate the capture). Returns at once, without a
// CUDA call, before the process's first launch (nothing can have been recorded).
void check_device_status(Stream stream);

// Debug mode: `bytes` bytes at the device address `src` (on `device`) into host memory `dst`,
// ordered after `stream`'s work, then synchronizes the stream. Throws kValue while `stream` is
// capturing (debug mode cannot validate inside a capture).
void copy_to_host(void* dst, const void* src, size_t bytes, int device, Stream stream,
                  const char* where);

}  // namespace hopattn::kernels
