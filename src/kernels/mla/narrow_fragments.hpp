// Where the narrow schedule's register A operands come from (narrow.cuh, fp8 cache): which raw
// row and bytes each thread loads, and how the codes become the fragments of wgmma's A operand.
// Plain C++ as well, so that the CPU tests check the layout algebra (tests/cpu/
// mla_narrow_fragments_test.cpp): that S^T = K Q^T and O^T += V^T P^T come out exactly, and that
// no 8-lane phase of the 16-byte loads meets a bank conflict at the raw ring's row stride.
//
// A fragment (m64k16, 16-bit, four 32-bit registers a thread; warp w of the warpgroup owns rows
// 16 w .. 16 w + 15): register r holds row 16 w + lane / 4 + 8 (r & 1) and the k columns
// 2 (lane % 4) + 8 (r >> 1) + {0, 1}, the lower column in the low half.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.hpp"
#include "plan/mla_tiles.hpp"

namespace hopattn::kernels::mla::narrow_fragments {

// Raw rows of the ring 16 bytes apart past their 576 codes (37 chunks): with the orders below
// every 8-lane phase of the consumers' 16-byte loads hits 8 different bank groups, in the S steps
// (two rows 4 apart, 64 contiguous bytes each) and the P V steps (four rows, two feature chunks
// 64 bytes apart) alike; at 576 the P V loads were 4-way conflicts.
inline constexpr uint32_t kRawRowBytes = plan::mla::kQkDim + 16;

// Keys (S^T's m, P^T's k): logical key 8 a + b of a 64-key pair is the pair's physical row
// 8 a + key_order(b), b -> 0, 4, 1, 5, 2, 6, 3, 7: the two rows an 8-lane phase of the S loads
// reads lie 4 rows apart (64 bytes apart in the banks at a 592-byte stride), and the P V loads'
// rows of one phase, q, q + 4, ... fall on distinct bank groups.
HOPATTN_HOST_DEVICE constexpr int key_order(int b) { return (b >> 1) + 4 * (b & 1); }
HOPATTN_HOST_DEVICE constexpr int key_row(int m) { return (m & ~7) + key_order(m & 7); }

// Columns (S^T's k): within each 64-column group, thread lane % 4 = t reads the 16 codes at bytes
// 16 t .. 16 t + 15 of a row; byte 4 j + e is k step j's column 2 t + {0, 1, 8, 9}[e]. Q is
// stored in that order: the 32-bit pair i (elements 2 i, 2 i + 1) of Q's physical 16-byte chunk
// `chunk` goes to logical chunk q_chunk_of(chunk, i), at byte q_byte_of(chunk).
HOPATTN_HOST_DEVICE constexpr int q_chunk_of(int chunk, int i) {
  return 8 * (chunk / 8) + 2 * (2 * (chunk % 8 % 2) + i / 2) + i % 2;
}
HOPATTN_HOST_DEVICE constexpr int q_byte_of(int chunk) { return 4 * (chunk % 8 / 2); }

// S^T of a pair: warp w reads block w / 2 of the pair; its thread's rows are s_row and s_row + 8
// of that block, 16 bytes at s_byte(lane, group) for each of the 9 groups of 4 k steps.
HOPATTN_HOST_DEVICE constexpr int s_block(int warp) { return warp >> 1; }
HOPATTN_HOST_DEVICE constexpr int s_row(int warp, int lane) {
  return 16 * (warp & 1) + key_order(lane / 4);
}
HOPATTN_HOST_DEVICE constexpr int s_byte(int lane, int group) {
  return 64 * group + 16 * (lane % 4);
}

// Features (O^T's m): logical feature 64 c + 16 w + 8 h + lane / 4 is physical feature
// feature_of(w, lane, c, h), so that a thread's 16 features of a key are one 16-byte load at
// pv_byte and the two feature chunks of an 8-lane phase lie 64 bytes apart.
HOPATTN_HOST_DEVICE constexpr int pv_byte(int warp, int lane) {
  return 128 * warp + 16 * key_order(lane / 4);
}
HOPATTN_HOST_DEVICE constexpr int feature_of(int warp, int lane, int c, int h) {
  return pv_byte(warp, lane) + 2 * c + h;
}

// P V step j (keys 16 j .. 16 j + 15 of the pair): load r = 0..3 is row pv_row(j, lane, r) of
// block j / 2 of the pair, logical key 16 j + 2 (lane % 4) + {0, 1, 8, 9}[r].
HOPATTN_HOST_DEVICE constexpr int pv_block(int j) { return j / 2; }
HOPATTN_HOST_DEVICE constexpr int pv_row(int j, int lane, int r) {
  return 16 * (j % 2) + lane % 4 + 4 * r;
}

// prmt.b32 (byte k of the result is byte (selector nibble k) of {b:a}).
HOPATTN_HOST_DEVICE uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, selector);
#else
  const uint64_t both = (uint64_t{b} << 32) | a;
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t from = (selector >> (4 * k)) & 7;
    r |= static_cast<uint32_t>((both >> (8 * from)) & 0xff) << (8 * k);
  }
  return r;
#endif
}

// The fragments of one S group (4 k steps) from the thread's words of rows s_row (lo) and
// s_row + 8 (hi); widen(word, high) turns the code pair in bytes 0, 1 (high: 2, 3) of a word into
// one 16-bit pair, the lower byte in the low half.
template <class Widen>
HOPATTN_HOST_DEVICE void s_fragments(const uint32_t (&lo)[4], const uint32_t (&hi)[4],
                                     uint32_t (&f)[4][4], Widen widen) {
  for (int j = 0; j < 4; ++j) {
    f[j][0] = widen(lo[j], false);
    f[j][1] = widen(hi[j], false);
    f[j][2] = widen(lo[j], true);
    f[j][3] = widen(hi[j], true);
  }
}

// The fragments of feature chunks 2 w0 .. 2 (w0 + kWords) - 1 at one P V step (f[0] is chunk
// 2 w0) from the words of its four loads (key[r] = load r's 16 bytes): word w of a load holds
// features (c, h) = (2 w, 0), (2 w, 1), (2 w + 1, 0), (2 w + 1, 1), and a byte permute pairs the
// same feature of two keys. All 8 chunks: kWords = 4, w0 = 0.
template <int kWords = 4, class Widen>
HOPATTN_HOST_DEVICE void pv_fragments(const uint32_t (&key)[4][4], uint32_t (&f)[2 * kWords][4],
                                      Widen widen, int w0 = 0) {
  for (int i = 0; i < kWords; ++i) {
    const int w = w0 + i;
    const uint32_t lo01 = byte_perm(key[0][w], key[1][w], 0x5140);
    const uint32_t hi01 = byte_perm(key[0][w], key[1][w], 0x7362);
    const uint32_t lo23 = byte_perm(key[2][w], key[3][w], 0x5140);
    const uint32_t hi23 = byte_perm(key[2][w], key[3][w], 0x7362);
    f[2 * i][0] = widen(lo01, false);
    f[2 * i][1] = widen(lo01, true);
    f[2 * i][2] = widen(lo23, false);
    f[2 * i][3] = widen(lo23, true);
    f[2 * i + 1][0] = widen(hi01, false);
    f[2 * i + 1][1] = widen(hi01, true);
    f[2 * i + 1][2] = widen(hi23, false);
    f[2 * i + 1][3] = widen(hi23, true);
  }
}

}  // namespace hopattn::kernels::mla::narrow_fragments
