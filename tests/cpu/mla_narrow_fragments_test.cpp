// The layout algebra of the mla narrow schedule's register A operands (fp8 cache;
// src/kernels/mla/narrow_fragments.hpp): a warpgroup's 128 threads emulated on the CPU, each
// loading the raw bytes the kernel's functions name and building its fragments with them, with
// wgmma's A-fragment layout (register r: row 16 warp + lane / 4 + 8 (r & 1), k columns
// 2 (lane % 4) + 8 (r >> 1) + {0, 1}, the lower in the low half) and Q stored as the kernel
// stores it. The codes stand for themselves (the widening is exact and elementwise), so S^T and
// O^T must come out exactly as the sums over the pair's physical rows; and every 8-lane phase of
// the 16-byte loads must hit 8 different bank groups at the ring's row stride.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "kernels/mla/narrow_fragments.hpp"

namespace hopattn::kernels::mla::narrow_fragments {
namespace {

constexpr int kKeys = 64, kRows = 16, kCols = plan::mla::kQkDim, kFeatures = plan::mla::kLatentDim;
constexpr int kBlockKeys = 32;

// The widening stand-in: the two codes of a pair kept as they are, one a 16-bit half.
struct KeepCodes {
  uint32_t operator()(uint32_t four, bool high) const {
    const uint32_t two = high ? four >> 16 : four & 0xffffu;
    return (two & 0xffu) | ((two >> 8) & 0xffu) << 16;
  }
};
int64_t half(uint32_t pair, int e) { return (pair >> (16 * e)) & 0xffffu; }

struct Pair {
  std::vector<uint8_t> raw;  // two 32-key blocks of rows of kRawRowBytes bytes
  uint32_t word(int block, int row, int byte) const {
    const size_t at = (size_t(block) * kBlockKeys + row) * kRawRowBytes + byte;
    return raw[at] | raw[at + 1] << 8 | raw[at + 2] << 16 | uint32_t{raw[at + 3]} << 24;
  }
  int64_t code(int key, int column) const {
    return raw[(size_t(key / kBlockKeys) * kBlockKeys + key % kBlockKeys) * kRawRowBytes + column];
  }
};

Pair random_pair(std::mt19937& rng) {
  Pair p;
  p.raw.resize(2 * kBlockKeys * kRawRowBytes);
  for (uint8_t& b : p.raw) b = static_cast<uint8_t>(rng());
  return p;
}

TEST(MlaNarrowFragments, KeyAndFeatureOrdersArePermutations) {
  std::set<int> keys, features;
  for (int m = 0; m < kKeys; ++m) keys.insert(key_row(m));
  EXPECT_EQ(keys.size(), size_t(kKeys));
  EXPECT_EQ(*keys.rbegin(), kKeys - 1);
  for (int w = 0; w < 4; ++w) {
    for (int g = 0; g < 8; ++g) {
      for (int c = 0; c < 8; ++c) {
        for (int h = 0; h < 2; ++h) features.insert(feature_of(w, 4 * g, c, h));
      }
    }
  }
  EXPECT_EQ(features.size(), size_t(kFeatures));
  EXPECT_EQ(*features.rbegin(), kFeatures - 1);
}

TEST(MlaNarrowFragments, STransposeIsExact) {
  std::mt19937 rng(7);
  const Pair pair = random_pair(rng);
  std::vector<int64_t> q(kRows * kCols);  // physical column order, as in memory
  for (int64_t& x : q) x = static_cast<int64_t>(rng() % 61) - 30;
  // Q as the kernel stores it: pair i of physical chunk `chunk` at logical chunk q_chunk_of,
  // byte q_byte_of (two elements from element 8 * chunk' + q_byte_of / 2).
  std::vector<int64_t> stored(kRows * kCols, INT64_MIN);
  for (int row = 0; row < kRows; ++row) {
    for (int chunk = 0; chunk < kCols / 8; ++chunk) {
      for (int i = 0; i < 4; ++i) {
        const int at = 8 * q_chunk_of(chunk, i) + q_byte_of(chunk) / 2;
        stored[row * kCols + at] = q[row * kCols + 8 * chunk + 2 * i];
        stored[row * kCols + at + 1] = q[row * kCols + 8 * chunk + 2 * i + 1];
      }
    }
  }
  for (int64_t x : stored) ASSERT_NE(x, INT64_MIN) << "a logical column left unwritten";

  std::vector<int64_t> s(kKeys * kRows, 0);
  for (int warp = 0; warp < 4; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      const int block = s_block(warp), row = s_row(warp, lane);
      for (int group = 0; group < kCols / 64; ++group) {
        uint32_t lo[4], hi[4], f[4][4];
        for (int j = 0; j < 4; ++j) {
          lo[j] = pair.word(block, row, s_byte(lane, group) + 4 * j);
          hi[j] = pair.word(block, row + 8, s_byte(lane, group) + 4 * j);
        }
        s_fragments(lo, hi, f, KeepCodes{});
        for (int j = 0; j < 4; ++j) {
          for (int r = 0; r < 4; ++r) {
            const int m = 16 * warp + lane / 4 + 8 * (r & 1);
            for (int e = 0; e < 2; ++e) {
              const int k = 16 * (4 * group + j) + 2 * (lane % 4) + 8 * (r >> 1) + e;
              for (int n = 0; n < kRows; ++n) {
                s[m * kRows + n] += half(f[j][r], e) * stored[n * kCols + k];
              }
            }
          }
        }
      }
    }
  }
  for (int m = 0; m < kKeys; ++m) {
    for (int n = 0; n < kRows; ++n) {
      int64_t want = 0;
      for (int d = 0; d < kCols; ++d) want += pair.code(key_row(m), d) * q[n * kCols + d];
      ASSERT_EQ(s[m * kRows + n], want) << "S^T row " << m << " column " << n;
    }
  }
}

TEST(MlaNarrowFragments, OTransposeIsExact) {
  std::mt19937 rng(11);
  const Pair pair = random_pair(rng);
  std::vector<int64_t> pt(kKeys * kRows);  // P^T [logical key][row]
  for (int64_t& x : pt) x = static_cast<int64_t>(rng() % 61) - 30;
  std::vector<int64_t> o(kFeatures * kRows, 0);  // O^T [logical feature][row]
  for (int warp = 0; warp < 4; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < kKeys / 16; ++j) {
        uint32_t key[4][4], f[8][4];
        for (int r = 0; r < 4; ++r) {
          for (int w = 0; w < 4; ++w) {
            key[r][w] = pair.word(pv_block(j), pv_row(j, lane, r), pv_byte(warp, lane) + 4 * w);
          }
        }
        pv_fragments(key, f, KeepCodes{});
        for (int c = 0; c < 8; ++c) {
          for (int r = 0; r < 4; ++r) {
            const int m = 64 * c + 16 * warp + lane / 4 + 8 * (r & 1);
            for (int e = 0; e < 2; ++e) {
              const int k = 16 * j + 2 * (lane % 4) + 8 * (r >> 1) + e;
              for (int n = 0; n < kRows; ++n)
                o[m * kRows + n] += half(f[c][r], e) * pt[k * kRows + n];
            }
          }
        }
      }
    }
  }
  for (int c = 0; c < 8; ++c) {
    for (int warp = 0; warp < 4; ++warp) {
      for (int h = 0; h < 2; ++h) {
        for (int g = 0; g < 8; ++g) {
          const int m = 64 * c + 16 * warp + 8 * h + g;
          const int feature = feature_of(warp, 4 * g, c, h);
          for (int n = 0; n < kRows; ++n) {
            int64_t want = 0;
            for (int k = 0; k < kKeys; ++k)
              want += pair.code(key_row(k), feature) * pt[k * kRows + n];
            ASSERT_EQ(o[m * kRows + n], want) << "O^T row " << m << " (feature " << feature << ")";
          }
        }
      }
    }
  }
}

// A 16-byte shared load of a warp runs in four phases of 8 lanes; each phase is one pass when its
// 8 addresses lie in 8 different 16-byte bank groups (address / 16 mod 8).
bool conflict_free(const std::vector<uint32_t>& phase) {
  std::set<uint32_t> groups;
  for (uint32_t a : phase) groups.insert(a / 16 % 8);
  return groups.size() == phase.size();
}

TEST(MlaNarrowFragments, LoadsAreFreeOfBankConflicts) {
  for (int warp = 0; warp < 4; ++warp) {
    for (int p = 0; p < 4; ++p) {
      for (int h = 0; h < 2; ++h) {
        for (int group = 0; group < kCols / 64; ++group) {
          std::vector<uint32_t> phase;
          for (int lane = 8 * p; lane < 8 * p + 8; ++lane) {
            phase.push_back((s_row(warp, lane) + 8 * h) * kRawRowBytes + s_byte(lane, group));
          }
          EXPECT_TRUE(conflict_free(phase)) << "S load, warp " << warp << " phase " << p;
        }
      }
      for (int j = 0; j < kKeys / 16; ++j) {
        for (int r = 0; r < 4; ++r) {
          std::vector<uint32_t> phase;
          for (int lane = 8 * p; lane < 8 * p + 8; ++lane) {
            phase.push_back(pv_row(j, lane, r) * kRawRowBytes + pv_byte(warp, lane));
          }
          EXPECT_TRUE(conflict_free(phase)) << "P V load, warp " << warp << " phase " << p;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hopattn::kernels::mla::narrow_fragments
