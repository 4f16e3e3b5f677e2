// The kernels' side of the device status word (src/common/device_status.hpp): a kernel that meets
// an out-of-range device-resident index (one compare where the index is used) does not
// dereference it and calls record_violation(), which keeps the first violation of the device
// (compare-and-swap on the tag). The host reads it with hopattn::check_errors(). Plain C++ on
// the host (the CPU tests run the schedules there), without atomics.
#pragma once

#include <cstdint>

#include "common/device_status.hpp"
#include "kernels/common/host_device.hpp"

namespace hopattn::kernels {

#if defined(__CUDACC__)
// The device side, out of line: ptxas allocates registers for an inlined body even where it never
// runs, and a call keeps them out of the caller. Call it outside main loops (a call there makes
// the caller save its live registers; decode's main loop notes its bad pages in shared memory).
inline __device__ __noinline__ void record_violation_on_device(DeviceStatus* status, uint32_t tag,
                                                               int request, int position,
                                                               int64_t value, int64_t bound) {
  // A plain read first: a bad page table makes many threads fail at once, and only one claims.
  if (*reinterpret_cast<volatile uint32_t*>(&status->tag) != 0u) return;
  if (atomicCAS(&status->tag, 0u, tag) != 0u) return;
  status->request = request;
  status->position = position;
  status->value = value;
  status->bound = bound;
}
#endif

// The first violation into a word only one thread writes (no atomics): the host's status word
// in the CPU tests, a CTA's shared-memory note (fwd/mask.cuh).
HOPATTN_HOST_DEVICE void keep_first_violation(DeviceStatus* status, uint32_t tag, int request,
                                              int position, int64_t value, int64_t bound) {
  if (status->tag != 0u) return;
  status->tag = tag;
  status->request = request;
  status->position = position;
  status->value = value;
  status->bound = bound;
}

// A cold path: called only for a bad index, never in a correct launch. `status` may be null
// (no recording, as in the CPU tests that do not ask for it).
HOPATTN_HOST_DEVICE void record_violation(DeviceStatus* status, uint32_t tag, int request,
                                          int position, int64_t value, int64_t bound) {
  if (status == nullptr) return;
#if defined(__CUDA_ARCH__)
  record_violation_on_device(status, tag, request, position, value, bound);
#else
  keep_first_violation(status, tag, request, position, value, bound);
#endif
}

// 0 <= value <= bound, by one unsigned compare (bound >= 0).
HOPATTN_HOST_DEVICE bool in_closed_range(int64_t value, int64_t bound) {
  return static_cast<uint64_t>(value) <= static_cast<uint64_t>(bound);
}

}  // namespace hopattn::kernels
