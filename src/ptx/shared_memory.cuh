// Shared-memory accesses through 32-bit shared-window addresses. Generic 64-bit pointers into
// shared memory cost two registers each; a kernel that keeps many live (precomputed store
// addresses, say) under a tight register budget spills them.
#pragma once

#include <cstdint>

namespace hopattn::ptx {

// PTX ISA "cvta": the shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A kernel's dynamic shared memory from its first 1024-byte boundary: 128B-swizzled tiles (TMA
// boxes, wgmma operands) repeat every 1024 bytes and must start on one; launches allocate 1 KB
// more than the plan uses for it.
__device__ __forceinline__ uint8_t* align_to_1024(uint8_t* raw) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
}

// The same value, hidden from the optimizer: addresses derived from it are computed where they
// are used instead of being hoisted out of a loop and kept live (and spilled) across it.
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("" : "+r"(x));
  return x;
}
__device__ __forceinline__ uint64_t opaque(uint64_t x) {
  asm volatile("" : "+l"(x));
  return x;
}

// This thread's lane, read from %laneid at every use (volatile: never hoisted and kept live, for
// the producer warpgroup's 24 registers).
__device__ __forceinline__ uint32_t lane_id() {
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return lane;
}

// PTX ISA "st" (st.shared.v2.b32).
__device__ __forceinline__ void st_shared_v2(uint32_t addr, uint32_t x, uint32_t y) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr), "r"(x), "r"(y) : "memory");
}

// PTX ISA "st" (st.shared.b32).
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// PTX ISA "st" (st.shared.v4.b32).
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// Zeroes rows [row_begin, rows) of `panels` shared-memory panels of 128-byte rows (a tile of
// 64 16-bit columns a panel, `panel_bytes` apart), each thread `tid` of `threads` taking every
// threads-th 16-byte piece. A row of a 128B-swizzled panel stays in its 128 bytes, so this holds
// for any swizzle. The caller fences (fence.proxy.async before wgmma reads) and synchronizes.
template <int kPanels>
__device__ __forceinline__ void zero_panel_rows(uint32_t base, uint32_t panel_bytes, int row_begin,
                                                int rows, int tid, int threads) {
  constexpr int kChunks = 128 / 16;  // 16-byte pieces of a row
#pragma unroll 1
  for (int c = row_begin * kChunks + tid; c < rows * kChunks; c += threads) {
#pragma unroll
    for (int i = 0; i < kPanels; ++i) {
      st_shared_v4(base + i * panel_bytes + static_cast<uint32_t>(c) * 16, make_uint4(0, 0, 0, 0));
    }
  }
}

// PTX ISA "ld" (ld.shared.b32).
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// PTX ISA "ld" (ld.shared.v2.b32).
__device__ __forceinline__ uint2 ld_shared_v2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}

// PTX ISA "ld" (ld.shared.v4.b32).
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

}  // namespace hopattn::ptx
