// Conversion of fp32 pairs to packed 16-bit pairs: the step from a wgmma accumulator to an A
// fragment (P of O = P V) or to the output tile. Low half = first argument (the lower column).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hopattn::ptx {

// PTX ISA "cvt" (cvt.rn.bf16x2.f32 d, a, b puts a in the upper half, b in the lower).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// PTX ISA "cvt" (cvt.rn.f16x2.f32, same operand order).
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

template <class Elt>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<Elt, __nv_bfloat16>) {
    return pack_bf16x2(lo, hi);
  } else {
    static_assert(std::is_same_v<Elt, __half>, "pack2: bf16 or fp16");
    return pack_f16x2(lo, hi);
  }
}

}  // namespace hopattn::ptx
