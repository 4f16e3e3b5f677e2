// 16-byte shared-memory stores and loads through 32-bit shared-window addresses (staging of fp32
// tiles that a bulk copy or reduction reads next).
#pragma once

#include <cstdint>

namespace hopattn::ptx {

// PTX ISA "st" (st.shared.v4.f32).
__device__ __forceinline__ void st_shared_v4_f32(uint32_t addr, float a, float b, float c,
                                                 float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}

// PTX ISA "ld" (ld.shared.v4.f32).
__device__ __forceinline__ float4 ld_shared_v4_f32(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

}  // namespace hopattn::ptx
