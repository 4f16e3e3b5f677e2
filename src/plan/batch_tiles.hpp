// Tile shapes of the batch family (mixed prefill and decode requests in one persistent launch).
// The host planner (batch_plan.hpp) and the kernel (src/kernels/batch/) both read these, so the
// work the planner hands out is exactly the work the kernel's tiles can do: plain constexpr
// C++17, no CUDA headers.
//
// Rows. A tile's rows are packed (q position, q head) pairs of ONE KV head, as in the fwd
// family's GQA packing: with group = Hq / Hkv, packed row r of (request, KV head h) is q position
// r / group (0-based within the request) and q head h * group + r % group. K and V of the KV head
// are then read once for all its q heads. A tile always holds whole positions (all `group` heads
// of each of its positions), so that its rows map onto q / out rows position by position.
#pragma once

#include <cstdint>

namespace hopattn::plan {

enum class BatchTileKind : uint16_t {
  kPrefill = 0,  // 128-row wgmma tile (two consumer warpgroups of 64 rows), the fwd mainloop
  kDecode = 1,   // 16, 32 or 64 rows of mma.sync (one m16 tile per warp), the decode mainloop
  // A decode tile of at most kSideMaxRows rows that the side-lane kernel runs on producer warp 2
  // while the consumers run the CTA's other items (kernels/batch/side_lane.cuh); the plain
  // kernel runs it as kDecode. Planned only with BatchPlanLimits::side_decodes.
  kDecodeSide = 2,
};

// GQA ratios the batch family serves (DESIGN.md: any Hq % Hkv == 0, ratios 1..128). A prefill tile
// holds at least one whole position at every ratio.
inline constexpr int kMaxGroup = 128;

// ---------------------------------------------------------------------- prefill tile
inline constexpr int kPrefillTileRows = 128;
// Keys per KV block of the prefill mainloop: 128 (the fwd family's kBlockN) at head dims up to
// 128; 64 at head dim 256, where two 128 x 256 K/V stages and the 128 x 256 Q tile would not fit
// shared memory (the fwd family's 80-key blocks there do not divide the split granularity below).
inline constexpr int kPrefillKvBlock = 128;
inline constexpr int kPrefillKvBlockHd256 = 64;
constexpr int prefill_kv_block(int head_dim) {
  return head_dim > 128 ? kPrefillKvBlockHd256 : kPrefillKvBlock;
}

// Whole positions per prefill tile: floor(128 / group) positions of `group` rows each (a group
// that does not divide 128 leaves the last 128 % group rows of the tile idle).
constexpr int prefill_positions_per_tile(int group) { return kPrefillTileRows / group; }

// ---------------------------------------------------------------------- decode tile
inline constexpr int kDecodeRowsStep = 16;  // one mma.sync m16n8k16 row tile
inline constexpr int kDecodeMaxRows = 64;   // four warps, one m16 tile each
// Keys per KV block of the decode mainloop (decode family's kTileTokens).
inline constexpr int kDecodeKvBlock = 64;

// A request whose packed rows (q_len * group) fit one decode tile runs as a single decode tile of
// the smallest of 16, 32, 64 rows that holds them; 0: too many rows, it runs as prefill tiles.
constexpr int decode_tile_rows(int64_t rows) {
  if (rows <= 0 || rows > kDecodeMaxRows) return 0;
  if (rows <= 16) return 16;
  return rows <= 32 ? 32 : 64;
}

// The side lane: rows are the N of one mma.sync m16n8k16 (keys are its M), so up to 8 rows; head
// dims up to 128 (O of 8 rows in 32 registers of a 64-register producer warp).
inline constexpr int kSideMaxRows = 8;
inline constexpr int kSideMaxHeadDim = 128;

// ---------------------------------------------------------------------- KV split
// A (request, KV head, row tile) whose keys are split across CTAs is cut at absolute key indices
// that are multiples of kKvChunkKeys, so no KV block of either mainloop straddles two chunks and
// each chunk is at least this many keys (edge chunks at least half of it).
inline constexpr int kKvChunkKeys = 128;
static_assert(kKvChunkKeys % kPrefillKvBlock == 0 && kKvChunkKeys % kPrefillKvBlockHd256 == 0 &&
                  kKvChunkKeys % kDecodeKvBlock == 0,
              "split points fall on KV block boundaries of both tile kinds");
// The most chunks one (request, KV head, row tile) is split into: the length of a merge record's
// partial list, which the merge pass walks.
inline constexpr int kMaxSplits = 128;

}  // namespace hopattn::plan
