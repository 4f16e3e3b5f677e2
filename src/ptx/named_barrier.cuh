// Named barriers: CTA barriers among a subset of warps (HOPPER_NOTES.md section 7). Id 0 is
// __syncthreads(); kernels name the other ids in their traits. `threads` is a multiple of 32 and
// counts every thread that syncs or arrives in one phase.
#pragma once

#include <cstdint>

namespace hopattn::ptx {

// PTX ISA "bar / barrier" (bar.sync): waits until `threads` threads have arrived on `id`.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// PTX ISA "bar / barrier" (barrier.sync without .aligned): the same wait, for a barrier that its
// threads reach from different instructions (two instantiations of one function, one per
// warpgroup role). bar.sync is barrier.sync.aligned, which asks every thread to execute the same
// instruction; compute-sanitizer's synccheck reports "Divergent thread(s) in block" otherwise.
__device__ __forceinline__ void named_barrier_sync_unaligned(uint32_t id, uint32_t threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// PTX ISA "bar / barrier" (bar.arrive): counts this warp's arrival on `id` without waiting.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace hopattn::ptx
