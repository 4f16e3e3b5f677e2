// Tile configuration and shared-memory plan of the MLA kernel's narrow schedule (narrow.cuh), for
// requests of at most 16 rows (a tensor-parallel shard of 16 heads at q_len 1): the MMAs take
// the 64 keys of a block as M and the rows as N (S^T = K Q^T, O^T += V^T P^T), so a block costs
// m64n16 steps instead of a 64-row tile of which 48 rows are padding.
//
// The producer is MlaLoader's. 16-bit cache: 32-key stages by TMA or cp.async; two consecutive
// stages form one 64-key operand because their panels interleave: panel i of stage 2k lies at
// pair k's panel i, rows 0..31, and of stage 2k + 1 at rows 32..63. fp8 cache: 32-key blocks of
// raw codes by cp.async into a ring of ten, from which the consumers build the MMAs' A operands
// in registers (kRegisterA). Consumer warpgroup g takes the pairs g, g + 2, ... with a softmax
// state of its own; the two states are merged at the end of the tile.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/mla/narrow_fragments.hpp"
#include "kernels/mla/traits.cuh"

namespace hopattn::kernels::mla {

// The consumers' exchanges through shared memory, each an mbarrier used as a barrier (every
// party arrives, then waits for the phase): compute-sanitizer's racecheck follows an mbarrier's
// release / acquire order, not a named barrier's (it reported each exchange over bar.sync as a
// hazard, run set q). After full[kStages] and empty[kStages]:
constexpr int kMaxRawSlots = 12;
enum NarrowSync : int {
  kMaxReady = 0,    // + g: consumer g's column maxima of a block (128 arrivals)
  kPReady = 2,      // + g: consumer g's P^T tile (128)
  kStateReady = 4,  // both consumers' final state, then their O^T stagings (256)
  kQLoaded = 5,     // Q rescaled into shared memory with its row exponents (256)
  kRawFull = 6,     // + slot: an fp8 raw block has landed (128 producer cp.async arrivals)
  kRawEmpty = 6 + kMaxRawSlots,  // + slot: the consumer reading the block is done with it (128)
  kNumNarrowSyncs = 6 + 2 * kMaxRawSlots,
};

// kCols_: the N of every MMA, the rows of the tile: 16, or 32 with an fp8 cache (whose consumers
// hold no 16-bit copy of the cache, so that Q and P^T of 32 rows still leave nine raw blocks).
template <class Elt_, bool kFp8Cache_ = false, int kCols_ = plan::mla::kNarrowRows>
struct NarrowTraits : MlaTileShape<plan::mla::kBlockKeys>, MlaEqualConsumers {
  using Elt = Elt_;
  // An fp8 cache widens to fp16 whatever q's type: one conversion a pair of codes (cvt e4m3x2 ->
  // f16x2), where bf16 takes four (ptx/dequant.cuh) and the SM's conversion throughput bounded
  // the producer (run set q: 2470 cycles a 32-key block, 7.5 codes a cycle). A bf16 q is then
  // rescaled by a power of two per row into fp16 (narrow.cuh, load_q_rescaled); the output stays
  // Elt.
  using MmaElt = std::conditional_t<kFp8Cache_, __half, Elt>;
  static constexpr bool kRescaleQ = !std::is_same_v<MmaElt, Elt>;
  static_assert(std::is_same_v<Elt, __nv_bfloat16> || std::is_same_v<Elt, __half>,
                "mla: bf16 or fp16");
  static constexpr bool kFp8Cache = kFp8Cache_;
  static constexpr bool kSeesaw = false;
  static constexpr bool kNarrow = true;

  static constexpr int kCols = kCols_;  // N of every MMA: the tile's rows
  static_assert(kCols == 16 || (kCols == 32 && kFp8Cache_), "16 rows, or 32 with an fp8 cache");
  static constexpr int kPairKeys = 2 * kBlockKeys;  // M of the MMAs: one pair of stages
  // Registers (MlaEqualConsumers): a consumer holds O^T (kCols / 2 a chunk, 8 chunks), S^T
  // (kCols / 2) and its columns' sums, and with an fp8 cache the fragments it converts (at 32
  // columns O^T alone is 128 of its 224: narrow.cuh keeps the columns' limits, scales and running
  // maxima in shared memory and converts V^T a half step at a time).

  // Q: kCols rows a panel.
  static constexpr uint32_t kQPanelBytes = kCols * kRowBytes;
  static constexpr uint32_t kQBytes = kQPanelBytes * kPanels;
  // 16-bit cache: four 32-key stages, as two interleaved pairs; a pair's panel is 64 rows (8 KB).
  // An fp8 cache has no 16-bit stages: the consumers take the MMAs' K and V operands from the
  // codes themselves (kRegisterA below).
  static constexpr int kStages = kFp8Cache ? 0 : 4;
  static constexpr uint32_t kKVPanelStride = 2 * kKVPanelBytes;
  static constexpr uint32_t kPairBytes = kKVPanelStride * kPanels;
  __host__ __device__ static constexpr uint32_t stage_offset(uint32_t stage) {
    return (stage / 2) * kPairBytes + (stage % 2) * kKVPanelBytes;
  }
  // fp8: the MMAs' A operands (K of S^T = K Q^T, V^T of O^T += V^T P^T) from registers, each
  // consumer converting its pair's codes from the raw ring to fp16 fragments as it issues the
  // MMAs (narrow.cuh). No widened copy is stored, so shared memory holds ten raw blocks (five
  // pairs; nine at 32 columns) of codes where the widening schedule held three beside its pairs,
  // which left the ring full and DRAM idle while both consumers computed (run set q: 2.25 TB/s
  // of fp8 bytes at B = 128, kv 32k).
  static constexpr bool kRegisterA = kFp8Cache;
  // fp8: raw 576-byte rows of a block (ckv then kpe), by cp.async (loader.cuh, run_fp8_raw):
  // as many blocks as shared memory holds beside Q, P^T and the small buffers (10 at 16 rows,
  // 9 at 32).
  static constexpr uint32_t kRawRowBytes = narrow_fragments::kRawRowBytes;  // 592
  static constexpr uint32_t kRawBytes = kBlockKeys * kRawRowBytes;
  static constexpr uint32_t kPTBytes = kCols * kRowBytes;  // below
  // Everything but Q and the ring: P^T, maxima, states, q exponents, column limits and scales,
  // running maxima, row tables, barriers; and 2 KB for the base's alignment and P^T's boundary.
  static constexpr uint32_t kSmallBytes =
      2 * kPTBytes + 2 * 2 * 2 * 4 * kCols * 4 + 7 * kCols * 4 + 2 * kBlockKeys * 8 + 64 * 8 + 2048;
  static constexpr int raw_slots_that_fit() {
    const int n = static_cast<int>((232448 - kQBytes - kSmallBytes) / kRawBytes);
    return n < kMaxRawSlots ? n : kMaxRawSlots;
  }
  static constexpr int kRawSlots = kFp8Cache ? raw_slots_that_fit() : 0;
  static_assert(kRawSlots <= kMaxRawSlots, "one full and one empty barrier a raw slot");
  // The producer only copies codes; the consumers read them (loader.cuh, run_fp8_raw).
  static constexpr bool kRawRing = kFp8Cache;
  static constexpr int kRawFullBarrier = 2 * kStages + kRawFull;  // from full(0)
  static constexpr int kRawEmptyBarrier = 2 * kStages + kRawEmpty;
  // P^T of a pair (kCols rows of 64 keys, 16-bit, one swizzled 128-byte row each), per consumer:
  // kPTBytes above.
  // The end of a tile stages each consumer's O^T as fp32 rows [kCols][kStageRow] over its own
  // pair (16-bit cache) or over the raw ring (fp8: consumer g at g * kStagingBytes), no stage or
  // slot being read or written any more then; kStageRow pads 512 so that the lanes of a warp,
  // 4 columns x 8 features, hit 32 different banks.
  static constexpr int kStageRow = kLatentDim + 4;
  static constexpr uint32_t kStagingBytes = kCols * kStageRow * 4;
  static_assert(kFp8Cache ? 2 * kStagingBytes <= kRawSlots * kRawBytes
                          : kStagingBytes <= kPairBytes,
                "O^T stagings fit");

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKVOffset = kQOffset + kQBytes;
  static constexpr uint32_t kRawOffset = kKVOffset + (kFp8Cache ? 0 : 2 * kPairBytes);
  static constexpr uint32_t kPOffset = (kRawOffset + kRawSlots * kRawBytes + 1023) / 1024 * 1024;
  // float [2 consumers][2 blocks][4 warps][kCols]: column maxima of a block, double-buffered.
  static constexpr uint32_t kMaxOffset = kPOffset + 2 * kPTBytes;
  // float [2 consumers][2 (max, sum)][4 warps][kCols]: each consumer's final state.
  static constexpr uint32_t kStateOffset = kMaxOffset + 2 * 2 * 4 * kCols * 4;
  // int [kCols]: each row's power-of-two exponent of the rescaled q (kRescaleQ), else unused.
  static constexpr uint32_t kQExpOffset = kStateOffset + 2 * 2 * 4 * kCols * 4;
  // int [kCols] then float [kCols]: each column's key limit and softmax scale (kRegisterA: the
  // consumers read them there instead of holding them in registers beside a 32-column O^T).
  static constexpr uint32_t kColumnOffset = kQExpOffset + kCols * 4;
  // float [2 consumers][2 (iteration parity)][kCols]: each consumer's running column maxima
  // (kRegisterA: read by the whole warpgroup, written by its first warp's 4 column lanes).
  static constexpr uint32_t kRunMaxOffset = kColumnOffset + 2 * kCols * 4;
  static constexpr uint32_t kRowTableOffset = kRunMaxOffset + 2 * 2 * kCols * 4;
  static constexpr uint32_t kBarrierOffset = kRowTableOffset + 2 * kBlockKeys * 8;
  static constexpr int kNumBarriers = 2 * kStages + kNumNarrowSyncs;
  static constexpr uint32_t kSmemBytes = kBarrierOffset + kNumBarriers * 8;
  static constexpr uint32_t kSmemAlloc = kSmemBytes + 1024;
  static_assert(kKVOffset % 1024 == 0 && kPOffset % 1024 == 0, "swizzled buffers 1 KB aligned");
  static_assert(kRawOffset % 16 == 0 && kRawBytes % 16 == 0, "16-byte chunks of codes");
  static_assert(kSmemAlloc <= 232448, "shared memory: 227 KB per block");
};

}  // namespace hopattn::kernels::mla
