#include "common/numeric.hpp"

#include <gtest/gtest.h>

namespace hopattn::numeric {
namespace {

TEST(Numeric, E4M3TabulatedValues) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(e4m3_to_float(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_EQ(float_to_e4m3(1000.f), 0x7e);   // saturates
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);  // tie rounds to even (1.0)
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);  // tie rounds to even (1.25)
}

TEST(Numeric, E5M2TabulatedValues) {
  EXPECT_EQ(e5m2_to_float(0x3c), 1.0f);
  EXPECT_EQ(e5m2_to_float(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(e5m2_to_float(0x7c)));
  EXPECT_EQ(e5m2_to_float(0x01), 1.52587890625e-05f);  // 2^-16
  EXPECT_EQ(float_to_e5m2(1e6f), 0x7b);
}

TEST(Numeric, Fp16AndBf16RoundTrip) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    ASSERT_EQ(float_to_fp16(fp16_to_float(uint16_t(h))), h) << h;
  }
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    ASSERT_EQ(float_to_bf16(bf16_to_float(uint16_t(h))), h) << h;
  }
  for (uint32_t b = 0; b < 0x7f; ++b) ASSERT_EQ(float_to_e4m3(e4m3_to_float(uint8_t(b))), b);
  for (uint32_t b = 0; b < 0x7c; ++b) ASSERT_EQ(float_to_e5m2(e5m2_to_float(uint8_t(b))), b);
  EXPECT_EQ(float_to_fp16(65520.f), 0x7c00);  // rounds up to inf
  EXPECT_EQ(fp16_to_float(0x0001), 5.9604644775390625e-08f);
}

}  // namespace
}  // namespace hopattn::numeric
