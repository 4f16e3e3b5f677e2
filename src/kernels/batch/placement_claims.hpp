// The claims of a placed batch launch (the concurrent form given an SM order: sm_placement.hpp),
// as host-and-device code over any atomic words, so that the CPU tests run the protocol itself
// under every landing of the CTAs they can make up (tests/cpu/batch_placement_test.cpp);
// placement.cuh runs it on the device's atomics.
//
// The grid has one CTA for each SM of the order; each group's first P lists hold the prefill
// (list g * group_ctas + l, l < P), the order's first decode_sms = sms - groups * P SMs are left
// to the decodes. A CTA that landed on SM rank r:
//   - r < decode_sms (a decode SM): exits, as long as fewer than decode_sms CTAs have counted
//     themselves there (word 0);
//   - otherwise claims prefill slot r - decode_sms (a bit of words 1..) or, where another CTA
//     holds it (or its SM has no rank: r < 0, or the count is full), the lowest free slot;
//     slot s runs list (s / P) * group_ctas + s % P.
// At most decode_sms CTAs exit, so at least groups * P claim, and a claim fails only once every
// slot is held: every prefill list runs exactly once, wherever the hardware put the CTAs (it may
// put two on one SM in turn: one exits, the next lands there).
#pragma once

#include <cstdint>

#include "kernels/common/host_device.hpp"

namespace hopattn::kernels::batch {

struct PlacedGrid {
  int sms = 0;         // CTAs of the grid, SMs of the order
  int decode_sms = 0;  // the order's first SMs, left to the decodes
  int lists = 1;       // P: prefill lists of each group
  int group_ctas = 1;  // CTAs (lists) of each group
  HOPATTN_HOST_DEVICE int slots() const { return sms - decode_sms; }
};

HOPATTN_HOST_DEVICE int lowest_bit(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __ffs(static_cast<int>(x)) - 1;
#else
  return __builtin_ctz(x);
#endif
}

// Words: uint32_t fetch_add(int i, uint32_t v), fetch_or(int i, uint32_t v) and load(int i)
// (atomic, on word i; word 0 the decode SMs' count, words 1.. the slots' bits).

// Claims slot `slot`: whether this call set its bit.
template <class Words>
HOPATTN_HOST_DEVICE bool claim_slot(Words& words, int slot) {
  const uint32_t bit = 1u << (slot & 31);
  return (words.fetch_or(1 + slot / 32, bit) & bit) == 0u;
}

// Claims the lowest free slot below `slots`, or returns -1 when every one is held.
template <class Words>
HOPATTN_HOST_DEVICE int claim_free_slot(Words& words, int slots) {
  for (int w = 0; w * 32 < slots; ++w) {
    const int left = slots - w * 32;
    const uint32_t valid = left >= 32 ? ~0u : (1u << left) - 1u;
    uint32_t seen = words.load(1 + w);
    while ((~seen & valid) != 0u) {
      const uint32_t free = ~seen & valid;
      const uint32_t bit = free & (0u - free);  // the lowest free slot
      const uint32_t old = words.fetch_or(1 + w, bit);
      if ((old & bit) == 0u) return w * 32 + lowest_bit(bit);
      seen = old | bit;
    }
  }
  return -1;
}

// The list a CTA on the SM of rank `rank` (< 0: an SM the order lacks) runs, or -1 (none: it
// exits).
template <class Words>
HOPATTN_HOST_DEVICE int claim_list(int rank, const PlacedGrid& g, Words& words) {
  int slot = -1;
  if (rank >= 0 && rank < g.decode_sms) {
    if (words.fetch_add(0, 1u) < static_cast<uint32_t>(g.decode_sms)) return -1;
  } else if (rank >= g.decode_sms && rank < g.sms && claim_slot(words, rank - g.decode_sms)) {
    slot = rank - g.decode_sms;
  }
  if (slot < 0) slot = claim_free_slot(words, g.slots());
  if (slot < 0) return -1;
  return slot / g.lists * g.group_ctas + slot % g.lists;
}

}  // namespace hopattn::kernels::batch
