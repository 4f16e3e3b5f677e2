// 8-bit KV codes to fp16 bit patterns with integer operations instead of conversion instructions
// (which issue on a slow pipe on Hopper). Plain C++ on both sides, so the CPU tests check the
// formulas on every code (tests/cpu/decode_kv_bits_test.cpp); the kernel calls the same functions.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.hpp"

namespace hopattn::kernels::decode {

// e4m3 codes in bytes 1 and 3 of `x` (bytes 0 and 2 are ignored) -> an fp16 pair (byte 1 -> low
// half) worth exactly 2^-8 x the e4m3 values; the NaN codes (0x7f, 0xff) -> NaN.
// The sign stays at bit 15 of the half and the 7 exponent and mantissa bits move one place down
// (bits 7..13): exponent field 0eeee, mantissa mmm0000000. For a normal code that is
// 2^(e-15) (1 + m/8) = 2^-8 x 2^(e-7) (1 + m/8); for a subnormal one (e = 0) the fp16 is
// subnormal too, 2^-14 x m/8 = 2^-8 x 2^-6 x m/8. So every finite code is exact, without a branch.
// A NaN code leaves magnitude 0x3f80 (448, the largest finite code, leaves 0x3f00): adding 0x80
// carries into bit 14 for it alone, and bit 14 turns 0x3f80 into 0x7f80, an fp16 NaN.
// 5 integer instructions (shift, 3 logic, 1 add) per pair, against one cvt.
HOPATTN_HOST_DEVICE constexpr uint32_t e4m3x2_hi_bytes_to_f16x2_scaled(uint32_t x) {
  const uint32_t mag = (x >> 1) & 0x3f803f80u;
  const uint32_t nan = (mag + 0x00800080u) & 0x40004000u;
  return (x & 0x80008000u) | mag | nan;
}

// The factor that takes e4m3x2_hi_bytes_to_f16x2_scaled's values back to the codes' values.
inline constexpr float kE4m3BitsUnscale = 256.f;

// e5m2 is the upper byte of an fp16 (same sign, exponent and bias; 2 mantissa bits), infinities
// and NaN included: the code in the high byte of a half, zeros below, is exactly its fp16.
HOPATTN_HOST_DEVICE constexpr uint32_t e5m2x2_to_f16x2(uint32_t lo_code, uint32_t hi_code) {
  return (lo_code & 0xffu) << 8 | (hi_code & 0xffu) << 24;
}

}  // namespace hopattn::kernels::decode
