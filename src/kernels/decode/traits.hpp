// Tile configuration and shared-memory plan of the decode kernel: the one place both the kernel
// and the host planner (src/plan/decode_plan.cpp) read them (the head dims and KV formats built
// are configs.hpp's table). Plain constexpr C++ without CUDA
// headers, so the planner and the CPU tests include it as well.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/decode/configs.hpp"

namespace hopattn::kernels::decode {

inline constexpr int kThreads = 128;  // 4 warps
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kTileTokens = 64;   // KV tokens per pipeline stage
inline constexpr int kBlockTokens = 16;  // tokens per softmax/PV step of one warp (MMA k = 16)
inline constexpr int kMmaRows = 16;      // rows of one mma.sync m16n8k16 tile
inline constexpr int kMaxRowTiles = 4;   // m16 tiles per CTA: one per warp at most
inline constexpr int kMaxRowsPerCta = kMaxRowTiles * kMmaRows;
inline constexpr int kLoadTokensPerWarp = kTileTokens / kWarps;  // each warp gathers 16 rows
inline constexpr int kMaxSplits = 256;  // forced num_splits (the validator's bound)
// The heuristic's bound: one lane per split in the last block's weight pass (one load round).
inline constexpr int kMaxAutoSplits = 32;
inline constexpr int kMinTilesPerSplit = 2;
inline constexpr int kMaxBeams = 16;  // beams sharing one prefix (segments of a CTA)
inline constexpr int kMaxSegments = kMaxBeams + 1;
inline constexpr int kSmemPerSm = 228 * 1024;  // H100/H200 shared memory per SM
inline constexpr int kSmemPerBlockMax = 227 * 1024;

static_assert(kLoadTokensPerWarp == 16, "each warp gathers 16 token rows per tile");
static_assert(kTileTokens == kWarps * kBlockTokens, "one 16-token block per warp and row tile");

// One instantiation's geometry. Row = one token's K (or V) vector of one KV head. kCtasPerSm:
// 2 (the default: ~96 KB of ring, registers unbounded up to 255) or 3 (a ~64 KB ring and at most
// 168 registers, so three CTAs share an SM: 12 warps instead of 8 to hide latency with).
template <int kHeadDim, int kKvBytes, int kCtasPerSm = 2>
struct Traits {
  static_assert(built_head_dim(kHeadDim), "a head dim of configs.hpp");
  static_assert(kKvBytes == 1 || kKvBytes == 2, "8- or 16-bit KV");

  static constexpr int kHeadDimValue = kHeadDim;
  static constexpr int kRowBytes = kHeadDim * kKvBytes;
  static constexpr int kChunksPerRow = kRowBytes / 16;  // 16-byte cp.async pieces
  static constexpr int kTileBytes = kTileTokens * kRowBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K tile then V tile
  // About 96 KB of ring (two CTAs per SM where registers allow), never fewer than 3 stages; with
  // three CTAs per SM about 64 KB (D = 128 16-bit: 2 stages, one tile in flight per CTA while the
  // other is consumed: 96 KB per SM).
  static constexpr int kCtas = kCtasPerSm;
  static constexpr int kRingBudget = kCtasPerSm >= 3 ? 64 * 1024 : 96 * 1024;
  static constexpr int kMinStages = kCtasPerSm >= 3 ? 2 : 3;
  static constexpr int kStagesWanted = kRingBudget / kStageBytes;
  static constexpr int kStages =
      kStagesWanted < kMinStages ? kMinStages : (kStagesWanted > 8 ? 8 : kStagesWanted);
  static constexpr int kRingBytes = kStages * kStageBytes;
  // The gather's 16-byte copies per lane and tile: fully unrolled, ptxas hoists every shuffle and
  // 64-bit address of the 8 (D = 128 16-bit) iterations, ~40 registers; under the 168-register
  // bound of three CTAs that spills, so that configuration keeps the loop rolled.
  static constexpr int kIssueIters = kChunksPerRow * kLoadTokensPerWarp / 32;
  static constexpr int kIssueUnroll = kCtasPerSm >= 3 ? 1 : kIssueIters;

  // D = 256: a warp pair shares rows and keys; both compute S, each accumulates half of the
  // output features (a 16 x 256 fp32 accumulator alone would take 128 registers a thread).
  static constexpr int kFeatureSplit = kHeadDim == 256 ? 2 : 1;
  static constexpr int kWarpFeatures = kHeadDim / kFeatureSplit;
  static constexpr int kGroups = kWarps / kFeatureSplit;  // warp groups with their own rows/keys
  static constexpr int kMaxRows = kMmaRows * kGroups;     // rows per CTA: one m16 tile a group

  // The last CTA's merge of the splits loads its first partials before it computes their weights
  // (split_merge.cuh): 64 registers a thread, so only where the budget has them (D = 128 at two
  // CTAs an SM: D = 64 keeps three CTAs an SM by registers, the three-CTA kernel its 168).
  static constexpr bool kMergePrefetch = kHeadDim == 128 && kCtasPerSm < 3;

  // q fragments live in registers for D <= 128 (32 registers); D = 256 rereads them from smem.
  static constexpr bool kQInRegisters = kHeadDim <= 128;
  // q pieces a thread loads before storing them (load_q): one, see there.
  static constexpr int kQLoadBatch = 1;
  static constexpr int kQRowBytes = kHeadDim * 2;

  // End of the main loop: each warp's (16 rows x D) fp32 accumulator goes to smem for the
  // cross-warp merge; rows padded by 8 floats so the float2 stores of a warp hit 32 banks. Then
  // the row maxima and sums [warp][16] and the merge coefficients [warp][row of CTA].
  static constexpr int kMergeStride = kHeadDim + 8;
  static constexpr int kMergeOFloats = kGroups * kMmaRows * kMergeStride;
  static constexpr int kMergeFloats =
      kMergeOFloats + 2 * kGroups * kMmaRows + kGroups * kMaxRowsPerCta;
  // Last-block merge of the splits: one weight per (row, split), from the ring's start.
  static constexpr int kSplitWeightBytes = kMaxRowsPerCta * kMaxSplits * 4;
  static_assert(kMergeFloats * 4 <= kRingBytes, "the merge buffers reuse the KV ring");
  static_assert(kSplitWeightBytes <= kRingBytes, "the split weights reuse the KV ring");

  // Dynamic shared memory of one CTA: KV ring, then the q tile (rows_per_cta x D).
  static constexpr int smem_bytes(int rows_per_cta) {
    return kRingBytes + rows_per_cta * kQRowBytes;
  }
  static_assert(kRingBytes + kMaxRows * kQRowBytes + 2560 <= kSmemPerBlockMax,
                "dynamic + static shared memory of the largest CTA fits one SM");

  // ---------------------------------------------------------------- shared-memory swizzles
  // Byte offset of (row, byte) in a tile of rows of `row_bytes`: the linear offset with bits 4..6
  // (the 16-byte chunk within a 128-byte line) XORed by a per-row mask. Each mask depends on how
  // the rows are read (below), so that one read instruction touches all 32 banks once. For
  // 64-byte rows two rows share a line; their masks are equal, so the XOR stays a bijection.
  static constexpr uint32_t swizzled(int row, int byte, int row_bytes, uint32_t mask) {
    return static_cast<uint32_t>(row * row_bytes + byte) ^ (mask << 4);
  }

  // q (16-bit) and 16-bit K: lane (g, q) reads 32 bytes at 32q of rows g and g+8, eight lanes a
  // phase (rows 2p, 2p+1): odd rows move by one chunk.
  static constexpr uint32_t q_mask(int row) { return row & 1; }
  // K rows: 16-bit as q; 8-bit: 16 bytes at 16q (rows 2p, 2p+1 of 128+ bytes: odd rows move to
  // the other half line; 64-byte rows already fill a line as a pair).
  static constexpr uint32_t k_mask(int row) {
    return kKvBytes == 2 ? (row & 1) : (kRowBytes >= 128 ? 4 * (row & 1) : 0);
  }
  // V rows: 16-bit through ldmatrix.trans (8 consecutive rows, same chunk): mask = row % 8.
  // 8-bit: 8 bytes at 8g of rows 2q (+1, +8, +9); a half-warp phase reads rows 0, 2, 4, 6.
  static constexpr uint32_t v_mask(int row) {
    return kKvBytes == 2 ? (row & 7) : 2 * ((row >> 1) & 3);
  }
};

// Rows of one CTA for a request of `rows` (beam, token, head) rows: 16, 32 or 64 (32 at D=256).
constexpr int rows_per_cta_for(int head_dim, int rows) {
  const int max_rows = head_dim == 256 ? 2 * kMmaRows : kMaxRowsPerCta;
  const int r =
      rows <= kMmaRows ? kMmaRows : (rows <= 2 * kMmaRows ? 2 * kMmaRows : kMaxRowsPerCta);
  return r < max_rows ? r : max_rows;
}

// Head dims of the small-grid kernel (small_kernel.cuh): one warp's q fragments and o in
// registers.
constexpr bool small_kernel_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

// The narrow kernel (narrow_kernel.cuh): requests of at most kNarrowRows rows (the N of its
// MMAs) over a 16-bit cache of q's dtype, head dim 64 or 128, pages of whole 16-key blocks.
inline constexpr int kNarrowRows = 8;
constexpr bool narrow_kernel_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

// CTAs an SM of the small-grid kernel's instances: two, and over e4m3 and int8 caches also three
// (the conversions of one CTA overlap the others' loads; <= 168 registers and a 16 KB ring a
// warp, small_kernel.cuh). The plan takes three where they run the grid in fewer waves than two.
// e5m2 has no such instance: its codes widen by byte permutes alone, and three CTAs an SM
// measured 1.02x slower than two at batch 128 (docs/perf/decode.md, run set ak).
constexpr int small_kernel_max_ctas(KvFormat f) {
  return f == KvFormat::kE4M3 || f == KvFormat::kInt8 ? 3 : 2;
}

// Whether `ctas` CTAs of `bytes_per_cta` dynamic shared memory co-reside on one SM (1 KB of
// each CTA's share is reserved by the hardware; ~2.5 KB of static shared memory per CTA).
constexpr bool smem_fits(int bytes_per_cta, int ctas) {
  return ctas * (bytes_per_cta + 2560 + 1024) <= kSmemPerSm;
}

}  // namespace hopattn::kernels::decode
