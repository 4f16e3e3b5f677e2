// Host checks of the fwd kernel's index arithmetic (no GPU needed; compiled by nvcc because the
// scheduler header is device code): the multiply-high divisions and the tile order built on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/fwd/tile_scheduler.cuh"
#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::fwd {
namespace {

// The multiply-high division that splits tokens into (page, slot) and tile indices into
// (section, m_block, head, batch): exact for every divisor 1..4096 and 2^31 - 1, on numerators
// 0..2^16 and random ones below 2^31 (host arithmetic, no GPU needed).
TEST(FwdFastDivisor, MatchesIntegerDivision) {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  divisors.push_back(0x7fffffffu);
  divisors.push_back(1u << 30);
  for (uint32_t d : divisors) {
    const FastDivisor f = FastDivisor::of(d);
    for (uint32_t n = 0; n <= (1u << 16); n += (d > 64 ? 1 : 7)) {
      ASSERT_EQ(f.divide(n), n / d) << n << " / " << d;
    }
    for (int i = 0; i < 2000; ++i) {
      const uint32_t n = static_cast<uint32_t>(rng()) & 0x7fffffffu;
      ASSERT_EQ(f.divide(n), n / d) << n << " / " << d;
    }
  }
}

// The persistent schedule with multiply-high divisions visits the same tiles, in the same order,
// as plain integer division of the tile index (the order described in tile_scheduler.cuh).
TEST(FwdTileOrder, MatchesPlainDivision) {
  for (int m_blocks : {1, 3, 128}) {
    for (int heads : {1, 5, 32}) {
      for (int batch : {1, 2, 17}) {
        for (int section : {1, 4, 7, 64, heads * batch}) {
          if (section > heads * batch) continue;
          SchedulerParams p;
          p.num_m_blocks = m_blocks;
          p.num_heads = heads;
          p.batch = batch;
          p.section_bh = section;
          p.total_tiles = m_blocks * heads * batch;
          p.set_divisors();
          for (int linear = 0; linear < p.total_tiles; ++linear) {
            const int per_section = m_blocks * section;
            const int first_bh = linear / per_section * section;
            const int rem = linear % per_section;
            const int here = std::min(section, heads * batch - first_bh);
            const int bh = first_bh + rem % here;
            const WorkTile w = LptTileScheduler::tile_at(p, linear);
            ASSERT_EQ(w.m_block, m_blocks - 1 - rem / here) << linear;
            ASSERT_EQ(w.batch, bh / heads) << linear;
            ASSERT_EQ(w.head, bh % heads) << linear;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace hopattn::kernels::fwd
