// 16-byte shared-memory stores through 32-bit shared-window addresses (staging of fp32 tiles that
// a bulk copy or reduction reads next).
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

}  // namespace hopattn::ptx
