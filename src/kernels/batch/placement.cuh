// Which list of the plan a batch CTA runs. Plainly CTA c runs list c (batch_plan_layout.hpp). In
// a placed launch (the concurrent form given an SM order: sm_placement.hpp) the CTAs take their
// lists by the SM they landed on instead, so that the SMs the prefill leaves to the decodes are
// the order's first ones, not wherever the hardware put the CTAs past each group's prefill lists;
// the claims (placement_claims.hpp) run every list exactly once wherever the CTAs land. Their
// words are zeroed by the step's reset kernel (sm_placement.cu) before the step's fork.
#pragma once

#include <cstdint>

#include "kernels/batch/placement_claims.hpp"
#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::batch {

// A placed launch's list of the CTA, set by thread 0 at the kernel's start (take_list). -1: none
// to run.
__device__ __forceinline__ int* placed_list_cell() {
  __shared__ int list;
  return &list;
}

// The list the CTA runs: %ctaid.x, or in a placed launch the one it claimed. Read afresh each
// time (volatile reads, as LptTileScheduler reads %ctaid.x), so no register holds it; the branch
// is on a kernel parameter, so the plain launches read %ctaid.x as before.
template <bool kPlaceable>
__device__ __forceinline__ uint32_t cta_list(const fwd::BatchWorkParams& b) {
  uint32_t list;
  if (kPlaceable && b.sm_rank != nullptr) {
    asm volatile("ld.volatile.shared.u32 %0, [%1];\n"
                 : "=r"(list)
                 : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(placed_list_cell()))));
  } else {
    asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(list));
  }
  return list;
}

// The claim words of a placed launch on the device's atomics (placement_claims.hpp).
struct DeviceClaimWords {
  uint32_t* words;
  __device__ uint32_t fetch_add(int i, uint32_t v) { return atomicAdd(words + i, v); }
  __device__ uint32_t fetch_or(int i, uint32_t v) { return atomicOr(words + i, v); }
  __device__ uint32_t load(int i) { return *static_cast<volatile uint32_t*>(words + i); }
};

// The list a CTA of a placed launch runs, or -1 (placement_claims.hpp).
__device__ inline int claim_placed_list(const fwd::BatchWorkParams& b) {
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
  const int rank = smid < static_cast<uint32_t>(b.placed_sms) ? b.sm_rank[smid] : -1;
  PlacedGrid g;
  g.sms = b.placed_sms;
  g.decode_sms = b.decode_sms;
  g.lists = b.placed_lists;
  g.group_ctas = static_cast<int>(b.group_ctas.divisor);
  DeviceClaimWords words{b.claims};
  return batch::claim_list(rank, g, words);
}

// Thread 0, before the CTA's first barrier, in a placed launch: the CTA's list.
__device__ __forceinline__ void take_list(const fwd::BatchWorkParams& b) {
  if (b.sm_rank != nullptr) *placed_list_cell() = claim_placed_list(b);
}

}  // namespace hopattn::kernels::batch
