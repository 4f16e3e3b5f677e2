// One request's range [row, row + len) from a device-resident offsets array (cu_seqlens, a CSR
// page_indptr), clamped into [0, total]: a bad pair (outside the array it indexes, or backwards)
// then addresses nothing outside it. `ok` says whether the pair was valid; for the status word
// (device_status.cuh), `position` is the bad entry and `value` its content.
#pragma once

#include <cstdint>

#include "kernels/common/device_status.cuh"
#include "kernels/common/host_device.hpp"

namespace hopattn::kernels {

struct OffsetRange {
  int row, len;
  bool ok;
  int position;
  int64_t value;
};

HOPATTN_HOST_DEVICE OffsetRange offset_range(const int* offsets, int total, int b) {
  const int lo = offsets[b], hi = offsets[b + 1];
  OffsetRange r;
  r.row = lo < 0 ? 0 : (lo > total ? total : lo);
  const int end = hi < r.row ? r.row : (hi > total ? total : hi);
  r.len = end - r.row;
  const bool hi_ok = in_closed_range(hi, total);
  r.ok = hi_ok && in_closed_range(lo, hi);
  r.position = hi_ok ? b : b + 1;
  r.value = hi_ok ? lo : hi;
  return r;
}

}  // namespace hopattn::kernels
