// The device status word: the first out-of-range device-resident index a kernel met (a page id
// past the pool, a kv_len past its page list, offsets that leave their array). Kernels
// bounds-check every such index where they use it, never dereference a bad one, and record the
// first violation here (src/kernels/common/device_status.cuh); hopattn::check_errors() reads it.
// Plain C++ so that the CPU tests check the encoding and the message.
#pragma once

#include <cstdint>
#include <string>

namespace hopattn {

// Which family's kernel recorded the violation.
enum class StatusFamily : uint32_t {
  kFwd = 1,
  kBwd = 2,
  kDecode = 3,
  kMla = 4,
  kBatch = 5,
  kMerge = 6,
};

// Which index array held the bad value, and so what its bound means.
enum class StatusIndex : uint32_t {
  kPage = 1,         // a page id: valid in [0, bound) (bound = the pool's pages)
  kKvLen = 2,        // a kv_len: valid in [0, bound] (bound = tokens its page list holds)
  kPageIndptr = 3,   // a CSR page_indptr entry: valid in [0, bound] (bound = page_indices size)
  kCuSeqlensQ = 4,   // a cu_seqlens_q entry: valid in [0, bound] (bound = q's rows)
  kCuSeqlensK = 5,   // a cu_seqlens_k entry: valid in [0, bound] (bound = k's rows)
  kSharedKvLen = 6,  // a shared_kv_lens entry: valid in [0, bound] (bound = the shortest beam)
};

// One per device, zero when nothing was recorded. `tag` is written last by the one thread whose
// compare-and-swap claimed the word, so only the first violation is kept.
struct DeviceStatus {
  uint32_t tag;      // 0: none; else kStatusValid | family << 8 | index
  int32_t request;   // the request (batch row) whose index was bad
  int32_t position;  // the entry within that request's list (page slot; offset entry), or -1
  int32_t reserved;
  int64_t value;  // the bad value
  int64_t bound;  // its bound (StatusIndex says whether inclusive)
};
static_assert(sizeof(DeviceStatus) == 32, "one 32-byte word");

inline constexpr uint32_t kStatusValid = 0x80000000u;

constexpr uint32_t status_tag(StatusFamily family, StatusIndex index) {
  return kStatusValid | static_cast<uint32_t>(family) << 8 | static_cast<uint32_t>(index);
}
inline StatusFamily status_family(uint32_t tag) { return StatusFamily((tag >> 8) & 0xffu); }
inline StatusIndex status_index(uint32_t tag) { return StatusIndex(tag & 0xffu); }

// The public entry point of a family ("decode", "attention_fwd").
const char* status_family_name(StatusFamily family);

// What check_errors() raises: "hopattn.check_errors: decode: request 1: page_table entry 2 =
// 9: expected a page index in [0, 4) (the pages of the pool); ...". Empty when tag is 0.
std::string describe_status(const DeviceStatus& status);

}  // namespace hopattn
