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

// PTX ISA "red" (red.global.add.v4.f32, sm_90): adds four floats to 16 bytes of global
// memory (16-byte aligned) in one relaxed, gpu-scope reduction; no return value, so the issuing
// thread does not wait for it.
__device__ __forceinline__ void red_add_v4_f32(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}

// PTX ISA "membar / fence" (fence.acq_rel.gpu): this thread's earlier memory operations (its
// reductions included) are ordered before its later ones for every thread of the GPU.
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}

}  // namespace hopattn::ptx
