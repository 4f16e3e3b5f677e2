// Unpacking of 8-bit KV values (fp8 e4m3 / e5m2, int8) into 16-bit MMA operands. Every 8-bit
// value is exactly representable in fp16 (and then in bf16), so the unpacking itself is exact;
// the dequantization scale is applied elsewhere (to the logits for K, to the output for V).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hopattn::ptx {

// PTX ISA "cvt" (cvt.rn.f16x2.e4m3x2): the low byte becomes the low half.
__device__ __forceinline__ uint32_t cvt_f16x2_e4m3x2(uint16_t two) {
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(two));
  return r;
}

// PTX ISA "cvt" (cvt.rn.f16x2.e5m2x2): the low byte becomes the low half.
__device__ __forceinline__ uint32_t cvt_f16x2_e5m2x2(uint16_t two) {
  uint32_t r;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(r) : "h"(two));
  return r;
}

// PTX ISA "prmt" (prmt.b32): byte k of the result is byte (selector nibble k) of {b:a}.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

// int8 pairs to fp16 pairs without integer-to-float conversions: a biased byte u = x + 128 under
// the fp16 exponent of 1024 reads as 1024 + u (fp16 is exact on [1024, 2048)); subtracting 1152
// (0x6480) leaves x.
__device__ __forceinline__ uint2 int8x4_to_f16x2x2(uint32_t four) {
  const uint32_t biased = four ^ 0x80808080u;
  const uint32_t lo = prmt(biased, 0x64646464u, 0x5140u);  // bytes 0, 1 under 0x64 exponents
  const uint32_t hi = prmt(biased, 0x64646464u, 0x5342u);  // bytes 2, 3
  const __half2 bias = __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480));
  const __half2 a = __hsub2(*reinterpret_cast<const __half2*>(&lo), bias);
  const __half2 b = __hsub2(*reinterpret_cast<const __half2*>(&hi), bias);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
}

// e4m3 codes in bytes 0 and 2 of `x` (bytes 1 and 3 zero) -> a bf16 pair (byte 0 -> low half),
// exact for every code, NaN codes included. The code's 7 exponent and mantissa bits move to bits
// 4..10 of the half: exponent field 0000eeee, mantissa mmm0000, so a normal code reads as
// 2^(e-127) (1 + m/8) = 2^-120 x its value and a subnormal one (e = 0) as the bf16 subnormal
// 2^-126 x m/8 = 2^-120 x 2^-6 x m/8; one bf16x2 multiply by 2^120 (exact: a power of two, the
// products normal) restores the values. A NaN code (magnitude 0x7f0 after the shift) alone
// carries into bit 11 when 0x10 is added; 15 times that bit sets bits 11..14, which turns the
// half into 0x7ff0, a NaN that the multiply keeps.
__device__ __forceinline__ uint32_t e4m3x2_spread_to_bf16x2(uint32_t x) {
  const uint32_t sign = (x << 8) & 0x80008000u;
  const uint32_t mag = (x << 4) & 0x07f007f0u;
  const uint32_t nan = (mag + 0x00100010u) & 0x08000800u;
  const uint32_t bits = sign | mag | (nan * 15u);
  const __nv_bfloat162 scaled = *reinterpret_cast<const __nv_bfloat162*>(&bits);
  const __nv_bfloat162 k2pow120 =
      __halves2bfloat162(__ushort_as_bfloat16(0x7b80), __ushort_as_bfloat16(0x7b80));
  const __nv_bfloat162 r = __hmul2(scaled, k2pow120);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Four e4m3 codes (byte k = code k) -> two 16-bit pairs of `Elt` (bf16 or fp16), codes 0, 1 in
// .x and 2, 3 in .y, each the code's exact value.
template <class Elt>
__device__ __forceinline__ uint2 e4m3x4_to_16bit(uint32_t four) {
  if constexpr (std::is_same_v<Elt, __half>) {
    return make_uint2(cvt_f16x2_e4m3x2(static_cast<uint16_t>(four & 0xffffu)),
                      cvt_f16x2_e4m3x2(static_cast<uint16_t>(four >> 16)));
  } else {
    return make_uint2(e4m3x2_spread_to_bf16x2(prmt(four, 0u, 0x4140u)),
                      e4m3x2_spread_to_bf16x2(prmt(four, 0u, 0x4342u)));
  }
}

}  // namespace hopattn::ptx
