// FastDivisor (kernels/common/fast_divisor.hpp), the multiply-high division of the fwd scheduler
// and paged loaders and of the decode page lookup, against integer division: every divisor
// 1..4096 on numerators 0..2^16, every multiple of the divisor and its neighbour, edge values up
// to 2^31 - 1 and random ones; large divisors on edge values.
#include "kernels/common/fast_divisor.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace hopattn::kernels {
namespace {

TEST(FastDivisor, MatchesIntegerDivision) {
  std::mt19937_64 rng(7);
  const uint32_t edges[] = {
      0, 1, 2, 3, 15, 16, 17, 1 << 20, (1 << 30) - 1, 1u << 30, 0x7ffffffeu, 0x7fffffffu};
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (uint32_t d : {65535u, 65536u, 100000u, 1u << 30, 0x7fffffffu}) divisors.push_back(d);
  for (uint32_t d : divisors) {
    const FastDivisor f = FastDivisor::of(d);
    ASSERT_EQ(f.divisor, d);
    for (uint32_t n : edges) ASSERT_EQ(f.divide(n), n / d) << n << " / " << d;
    for (uint32_t n = 0; n <= (1u << 16); n += (d > 64 ? 1 : 7)) {
      ASSERT_EQ(f.divide(n), n / d) << n << " / " << d;
    }
    for (uint32_t n = 0; n < (1u << 16); n += d) {
      ASSERT_EQ(f.divide(n), n / d) << n << " / " << d;
      if (n > 0) ASSERT_EQ(f.divide(n - 1), (n - 1) / d) << n - 1 << " / " << d;
    }
    for (int i = 0; i < 2000; ++i) {
      const uint32_t n = static_cast<uint32_t>(rng()) & 0x7fffffffu;
      ASSERT_EQ(f.divide(n), n / d) << n << " / " << d;
    }
    for (int i = 0; i < 200; ++i) {  // every magnitude
      const uint32_t n = (static_cast<uint32_t>(rng()) & 0x7fffffffu) >> (i % 31);
      ASSERT_EQ(f.divide(n), n / d) << n << " / " << d;
    }
  }
}

}  // namespace
}  // namespace hopattn::kernels
