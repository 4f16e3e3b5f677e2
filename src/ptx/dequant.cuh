// Unpacking of 8-bit KV values (fp8 e4m3 / e5m2, int8) into 16-bit MMA operands. Every 8-bit
// value is exactly representable in fp16 (and then in bf16), so the unpacking itself is exact;
// the dequantization scale is applied elsewhere (to the logits for K, to the output for V).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hopattn::ptx {

// PTX ISA "cvt" (cvt.rn.f16x2.e4m3x2, the low byte becoming the low half) of the codes in
// bytes 0, 1 (kHigh = false) or 2, 3 (true) of a 32-bit word.
// The word is split into its halves by a mov.b32 inside the asm, so ptxas reads the high half
// through the conversion's operand selector (SASS `R.H1`); a 16-bit argument of `four >> 16` cost
// a shift first.
template <bool kHigh>
__device__ __forceinline__ uint32_t cvt_f16x2_e4m3x2_half(uint32_t four) {
  uint32_t r;
  if constexpr (kHigh) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, h;\n}\n"
        : "=r"(r)
        : "r"(four));
  } else {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}\n"
        : "=r"(r)
        : "r"(four));
  }
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

// The e4m3 pair in bytes 0, 1 (kHigh: 2, 3) of `four` (low byte -> low half) -> a bf16 pair, exact
// for every code, NaN codes included: e4m3 -> f16 (cvt, exact: every code is an f16), f16 -> f32
// (exact), f32 -> bf16 (exact: at most 4 significant bits). Four instructions a pair on sm_90 (one
// cvt, two half-to-float moves, one pack), against ten for an integer construction of the bf16
// bits.
template <bool kHigh>
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t four) {
  const uint32_t h = cvt_f16x2_e4m3x2_half<kHigh>(four);
  const __half2 v = *reinterpret_cast<const __half2*>(&h);
  const __nv_bfloat162 r = __floats2bfloat162_rn(__low2float(v), __high2float(v));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Four e4m3 codes (byte k = code k) -> two 16-bit pairs of `Elt` (bf16 or fp16), codes 0, 1 in
// .x and 2, 3 in .y, each the code's exact value.
template <class Elt>
__device__ __forceinline__ uint2 e4m3x4_to_16bit(uint32_t four) {
  if constexpr (std::is_same_v<Elt, __half>) {
    return make_uint2(cvt_f16x2_e4m3x2_half<false>(four), cvt_f16x2_e4m3x2_half<true>(four));
  } else {
    return make_uint2(e4m3x2_to_bf16x2<false>(four), e4m3x2_to_bf16x2<true>(four));
  }
}

}  // namespace hopattn::ptx
