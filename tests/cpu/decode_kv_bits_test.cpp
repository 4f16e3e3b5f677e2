// The decode kernel's integer shortcuts, checked exhaustively on the CPU with the kernel's own
// functions: e4m3 and e5m2 codes to fp16 bit patterns (kv_bits.hpp) on all 256 codes in both
// halves. The page division by multiply-high is FastDivisor's (fast_divisor_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "kernels/decode/kv_bits.hpp"

namespace hopattn::kernels::decode {
namespace {

// IEEE binary16 bit pattern -> its value (NaN as NaN).
double half_value(uint32_t bits) {
  const int s = (bits >> 15) & 1, e = (bits >> 10) & 0x1f, m = bits & 0x3ff;
  double mag;
  if (e == 0x1f) {
    mag = m == 0 ? INFINITY : NAN;
  } else if (e == 0) {
    mag = m * std::ldexp(1.0, -24);
  } else {
    mag = (1 + m / 1024.0) * std::ldexp(1.0, e - 15);
  }
  return s ? -mag : mag;
}

// OCP e4m3fn: bias 7, subnormals m * 2^-9, 0x7f / 0xff NaN, no infinities.
double e4m3_value(uint32_t code) {
  if ((code & 0x7f) == 0x7f) return NAN;
  const int e = (code >> 3) & 0xf, m = code & 7;
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return code & 0x80 ? -mag : mag;
}

// OCP e5m2: bias 15, subnormals m * 2^-16, exponent 31: inf (m = 0) or NaN.
double e5m2_value(uint32_t code) {
  const int e = (code >> 2) & 0x1f, m = code & 3;
  double mag;
  if (e == 0x1f) {
    mag = m == 0 ? INFINITY : NAN;
  } else {
    mag = e == 0 ? m * std::ldexp(1.0, -16) : (1 + m / 4.0) * std::ldexp(1.0, e - 15);
  }
  return code & 0x80 ? -mag : mag;
}

void expect_same(double got, double want, uint32_t code) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << code;
  } else {
    EXPECT_EQ(got, want) << "code 0x" << std::hex << code;
  }
}

TEST(DecodeKvBits, E4m3IntegerPathIsExactTimes2PowMinus8) {
  std::mt19937 rng(7);
  for (uint32_t lo = 0; lo < 256; ++lo) {
    for (uint32_t hi = 0; hi < 256; ++hi) {
      // Bytes 0 and 2 are ignored: random garbage there must not change the result.
      const uint32_t x = (rng() & 0x00ff00ffu) | lo << 8 | hi << 24;
      const uint32_t pair = e4m3x2_hi_bytes_to_f16x2_scaled(x);
      expect_same(half_value(pair & 0xffffu) * kE4m3BitsUnscale, e4m3_value(lo), lo);
      expect_same(half_value(pair >> 16) * kE4m3BitsUnscale, e4m3_value(hi), hi);
    }
  }
}

TEST(DecodeKvBits, E5m2IsTheHighByteOfItsHalf) {
  for (uint32_t lo = 0; lo < 256; ++lo) {
    for (uint32_t hi = 0; hi < 256; hi += 17) {
      const uint32_t pair = e5m2x2_to_f16x2(lo, hi);
      expect_same(half_value(pair & 0xffffu), e5m2_value(lo), lo);
      expect_same(half_value(pair >> 16), e5m2_value(hi), hi);
    }
  }
}

}  // namespace
}  // namespace hopattn::kernels::decode
