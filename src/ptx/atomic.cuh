// Global-memory atomics with explicit memory-model semantics.
#pragma once

#include <cstdint>

namespace hopattn::ptx {

// PTX ISA "atom" (atom.acq_rel.gpu.global.inc.u32): old = *p; *p = old >= limit ? 0 : old + 1.
// With limit = n - 1 the counter returns to 0 after exactly n increments, so a semaphore that
// elects the last of n blocks is left reset for the next launch (or CUDA-graph replay).
// acq_rel at gpu scope: this thread's earlier writes (and those it observed) are released to the
// next incrementer, and the previous incrementers' writes are acquired.
__device__ __forceinline__ uint32_t atomic_inc_acq_rel_gpu(uint32_t* p, uint32_t limit) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(p), "r"(limit)
               : "memory");
  return old;
}

}  // namespace hopattn::ptx
