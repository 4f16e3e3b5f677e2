// Warpgroup MMA (wgmma) ordering primitives and shared-memory matrix descriptors. The mma_async
// wrappers themselves are generated (wgmma_generated.cuh, tools/gen_wgmma.py).
//
// Order of use (HOPPER_NOTES.md section 1): wgmma_fence() by all 128 threads before the first
// wgmma and after any register write to an accumulator or A fragment -> wgmma_ss/rs ... ->
// wgmma_commit_group() -> wgmma_wait_group<N>() before touching those registers again.
#pragma once

#include <cstdint>

#include "ptx/wgmma_generated.cuh"

namespace hopattn::ptx {

// PTX ISA "wgmma.fence": orders prior register writes (accumulators, A fragments) and shared
// memory accesses of this warpgroup before the following wgmma.mma_async.
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// PTX ISA "wgmma.commit_group": closes the current group of issued wgmma.mma_async.
__device__ __forceinline__ void wgmma_commit_group() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// PTX ISA "wgmma.wait_group": waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group: 0..7 (larger untested)");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Keeps the compiler from moving its own reads or writes of an accumulator (or A fragment)
// register across a wgmma fence/wait: the hardware owns these registers in between, and an
// access the compiler hoisted into that window would race with the tensor core.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
template <class T, int kN>
__device__ __forceinline__ void fence_operands(T (&regs)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) fence_operand(regs[i]);
}

// ----------------------------------------------------------------------------------------------
// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format", asynchronous warpgroup
// level matrix shared memory layout). 64 bits:
//   [0,14)  start address >> 4        [16,30) leading-dimension byte offset >> 4
//   [32,46) stride-dimension byte offset >> 4   [49,52) base offset (0: tiles 1024-B aligned)
//   [62,64) swizzle: 0 none, 1 = 128B, 2 = 64B, 3 = 32B
// hopattn uses 128-byte swizzled tiles only: rows of 64 bf16/fp16 (128 B) as TMA writes them
// with CU_TENSOR_MAP_SWIZZLE_128B into a 1024-B aligned buffer; 8 rows form one 1024-B atom.
enum class Swizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

__device__ __forceinline__ uint64_t make_smem_desc(const void* smem, uint32_t leading_bytes,
                                                   uint32_t stride_bytes,
                                                   Swizzle swizzle = Swizzle::k128B) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
  desc |= static_cast<uint64_t>(swizzle) << 62;
  return desc;
}

// K-major operand (the reduction dimension is contiguous): Q and K of S = Q K^T, any row-major
// [rows][64] 128B-swizzled panel. Leading offset is unused with 128B swizzle (the atom is one
// 128-B row wide) and written as 16 B; stride = one 8-row atom = 1024 B. Advance along k by 16
// elements = 32 B inside the atom (desc_advance(desc, 32)); past 64 elements, next panel.
__device__ __forceinline__ uint64_t make_kmajor_desc(const void* smem) {
  return make_smem_desc(smem, 16, 1024);
}

// MN-major operand (the output dimension is contiguous): V of O = P V, stored [keys][64 d]
// panels, with wgmma imm-trans-b = 1. Leading offset = bytes between consecutive 64-wide
// panels along N (panel_bytes); stride = 1024 B between 8-key groups. Advance along k (keys) by
// 16 = two 8-row atoms = 2048 B.
__device__ __forceinline__ uint64_t make_mnmajor_desc(const void* smem, uint32_t panel_bytes) {
  return make_smem_desc(smem, panel_bytes, 1024);
}

// Moves the start address by `bytes` (multiple of 16); no carry into other fields because shared
// addresses fit the 14-bit field (256 KB >> 4).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + static_cast<uint64_t>(bytes >> 4);
}

}  // namespace hopattn::ptx
