// Host-side conversions between float and the 16- and 8-bit storage formats, bit-exact with the
// GPU's round-to-nearest-even conversions (fp8: cvt.rn.satfinite, i.e. saturating to the largest
// finite value). Used by the CPU reference, the tests and the CLI's data generators.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace hopattn::numeric {

// A binary floating-point storage format with `man_bits` stored mantissa bits.
struct MiniFloat {
  int exp_bits;
  int man_bits;
  int bias;
  double max_finite;
  bool has_inf;   // all-ones exponent encodes inf/NaN (fp16, e5m2); else only NaN (e4m3fn)
  bool saturate;  // overflow clamps to max_finite instead of becoming inf
};

inline constexpr MiniFloat kFP16{5, 10, 15, 65504.0, true, false};
inline constexpr MiniFloat kE4M3{4, 3, 7, 448.0, false, true};
inline constexpr MiniFloat kE5M2{5, 2, 15, 57344.0, true, true};

inline double minifloat_decode(uint32_t bits, const MiniFloat& f) {
  const int total = 1 + f.exp_bits + f.man_bits;
  const bool neg = (bits >> (total - 1)) & 1u;
  const uint32_t exp = (bits >> f.man_bits) & ((1u << f.exp_bits) - 1u);
  const uint32_t man = bits & ((1u << f.man_bits) - 1u);
  const uint32_t exp_max = (1u << f.exp_bits) - 1u;
  double v;
  if (f.has_inf && exp == exp_max) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (!f.has_inf && exp == exp_max && man == (1u << f.man_bits) - 1u) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(man), -f.man_bits),
                   static_cast<int>(exp) - f.bias);
  }
  return neg ? -v : v;
}

inline uint32_t minifloat_encode(double x, const MiniFloat& f) {
  const int total = 1 + f.exp_bits + f.man_bits;
  const uint32_t sign = std::signbit(x) ? (1u << (total - 1)) : 0u;
  const uint32_t exp_max = (1u << f.exp_bits) - 1u;
  const uint32_t man_all = (1u << f.man_bits) - 1u;
  if (std::isnan(x)) return sign | (exp_max << f.man_bits) | man_all;
  const int emin = 1 - f.bias;
  double a = std::fabs(x);
  if (std::isinf(a) && !f.saturate) return sign | (exp_max << f.man_bits);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);
  const int lead = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, lead - f.man_bits);
  double r = std::nearbyint(a / quantum) * quantum;  // FE_TONEAREST: ties to even
  if (r > f.max_finite) {
    if (f.saturate) {
      r = f.max_finite;
    } else {
      return sign | (exp_max << f.man_bits);  // inf
    }
  }
  if (r < std::ldexp(1.0, emin)) {  // subnormal (or rounded to zero)
    return sign | static_cast<uint32_t>(std::ldexp(r, f.man_bits - emin));
  }
  std::frexp(r, &e);
  const int exponent = e - 1;
  const uint32_t man =
      static_cast<uint32_t>(std::ldexp(std::ldexp(r, -exponent) - 1.0, f.man_bits));
  return sign | (static_cast<uint32_t>(exponent + f.bias) << f.man_bits) | man;
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

inline float fp16_to_float(uint16_t h) { return static_cast<float>(minifloat_decode(h, kFP16)); }
inline uint16_t float_to_fp16(float f) { return static_cast<uint16_t>(minifloat_encode(f, kFP16)); }
inline float e4m3_to_float(uint8_t b) { return static_cast<float>(minifloat_decode(b, kE4M3)); }
inline uint8_t float_to_e4m3(float f) { return static_cast<uint8_t>(minifloat_encode(f, kE4M3)); }
inline float e5m2_to_float(uint8_t b) { return static_cast<float>(minifloat_decode(b, kE5M2)); }
inline uint8_t float_to_e5m2(float f) { return static_cast<uint8_t>(minifloat_encode(f, kE5M2)); }

// int8 KV cache values: round to nearest, saturate to [-127, 127] (symmetric quantization).
inline int8_t float_to_int8(float f) {
  return static_cast<int8_t>(std::clamp(std::nearbyint(f), -127.0f, 127.0f));
}

}  // namespace hopattn::numeric
