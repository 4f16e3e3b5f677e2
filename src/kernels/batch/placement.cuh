// Which list of the plan a batch CTA runs. Plainly CTA c runs list c (batch_plan_layout.hpp). In
// a placed launch (the concurrent form given an SM order: sm_placement.hpp) the CTAs take their
// lists by the SM they landed on instead, so that the SMs the prefill leaves to the decodes are
// the order's first ones, not wherever the hardware put the CTAs past each group's prefill lists:
//   - a CTA on one of the first decode_sms SMs of the order exits, as long as fewer than
//     decode_sms CTAs have (a counter);
//   - any other CTA claims its SM's prefill slot (rank - decode_sms) or, where another CTA holds
//     it (or its SM is not in the order, or the counter is full), the lowest free slot; slot s is
//     list (s / P) * group_ctas + s % P, P prefill lists a group.
// The grid has as many CTAs as the order has SMs, so at most decode_sms CTAs exit and at least as
// many CTAs claim as there are slots: every list runs exactly once, wherever the CTAs land
// (placement may repeat an SM: a CTA that exits frees its SM for a later one). The claims are
// bits of words the launch's reset zeroes (sm_placement.cu) before the step's fork.
#pragma once

#include <cstdint>

#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::batch {

// The CTA's list, set by thread 0 at the kernel's start (take_list) and read by every warp
// through a volatile load, as %ctaid.x was read, so no register holds it. -1: none to run.
__device__ __forceinline__ int* cta_list_cell() {
  __shared__ int list;
  return &list;
}

__device__ __forceinline__ uint32_t cta_list() {
  uint32_t list;
  asm volatile("ld.volatile.shared.u32 %0, [%1];\n"
               : "=r"(list)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(cta_list_cell()))));
  return list;
}

// Claims slot `slot` of the bit words `words`: whether this call set its bit.
__device__ __forceinline__ bool claim_slot(uint32_t* words, int slot) {
  const uint32_t bit = 1u << (slot & 31);
  return (atomicOr(words + slot / 32, bit) & bit) == 0;
}

// Claims the lowest free slot below `slots`, or returns -1 when every one is held.
__device__ inline int claim_free_slot(uint32_t* words, int slots) {
  for (int w = 0; w * 32 < slots; ++w) {
    const int left = slots - w * 32;
    const uint32_t valid = left >= 32 ? ~0u : (1u << left) - 1u;
    uint32_t seen = *static_cast<volatile uint32_t*>(words + w);
    while ((~seen & valid) != 0u) {
      const uint32_t free = ~seen & valid;
      const uint32_t bit = free & (0u - free);  // the lowest free slot
      const uint32_t old = atomicOr(words + w, bit);
      if ((old & bit) == 0u) return w * 32 + __ffs(static_cast<int>(bit)) - 1;
      seen = old | bit;
    }
  }
  return -1;
}

// The list a CTA of a placed launch runs, or -1 (module comment).
__device__ inline int claim_list(const fwd::BatchWorkParams& b) {
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
  const int rank = smid < static_cast<uint32_t>(b.placed_sms) ? b.sm_rank[smid] : -1;
  const int slots = b.placed_sms - b.decode_sms;
  uint32_t* const words = b.claims + 1;
  int slot = -1;
  if (rank >= 0 && rank < b.decode_sms) {
    if (atomicAdd(b.claims, 1u) < static_cast<uint32_t>(b.decode_sms)) return -1;
  } else if (rank >= b.decode_sms && claim_slot(words, rank - b.decode_sms)) {
    slot = rank - b.decode_sms;
  }
  if (slot < 0) slot = claim_free_slot(words, slots);
  if (slot < 0) return -1;
  return slot / b.placed_lists * static_cast<int>(b.group_ctas.divisor) + slot % b.placed_lists;
}

// Thread 0, before the CTA's first barrier: the CTA's list.
__device__ __forceinline__ void take_list(const fwd::BatchWorkParams& b) {
  int list;
  if (b.sm_rank != nullptr) {
    list = claim_list(b);
  } else {
    asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(list));
  }
  *cta_list_cell() = list;
}

}  // namespace hopattn::kernels::batch
