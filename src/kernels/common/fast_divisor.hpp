// n / d for 0 <= n < 2^31 and a divisor d >= 1 fixed per launch, by one multiply-high, an add and
// a shift instead of the ~20-instruction integer division: the fwd tile scheduler and paged
// loaders, and the decode page lookup. Round-up method (Granlund and Montgomery, 1994): with
// s = ceil(log2 d) and mul = floor(2^32 (2^s - d) / d) + 1 < 2^32, n / d = (umulhi(n, mul) + n)
// >> s for every n < 2^31 (the sum stays below 2^32 because umulhi(n, mul) <= n). Plain C++ on
// the host, so the CPU tests check it.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.hpp"

namespace hopattn::kernels {

struct FastDivisor {
  uint32_t divisor = 1, mul = 1, shift = 0;

  static FastDivisor of(uint32_t d) {
    FastDivisor f;
    f.divisor = d;
    while ((uint64_t{1} << f.shift) < d) ++f.shift;
    f.mul = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - d) / d + 1);
    return f;
  }

  HOPATTN_HOST_DEVICE uint32_t divide(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * mul) >> 32);
#endif
    return (hi + n) >> shift;
  }
};

}  // namespace hopattn::kernels
