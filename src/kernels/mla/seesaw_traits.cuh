// Tile configuration and shared-memory plan of the MLA kernel's two-block ("seesaw") schedule for
// 16-bit caches (seesaw.cuh): KV blocks of 64 keys in two buffers, consumer warpgroup w computes
// S of every block 2k + w, and each consumer adds both blocks of a pair into its 256 output
// columns. S at N = 64 runs the tensor cores at 95-100% of their rate where the 32-key tiles of
// MlaTraits ran at 63-68% (tools/wgmma_rate.cu), and the S GEMMs no longer queue on one
// warpgroup.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/mla/traits.cuh"

namespace hopattn::kernels::mla {

// The handoffs between the two consumers, mbarriers of 128 arrivals (one warpgroup arrives, the
// other waits; release / acquire ordering, which the race checker follows), each completing
// once a block pair. A warpgroup reaches its next arrival on one only after the other has
// passed its wait of the previous phase (seesaw.cuh), so a waiter's parity never aliases.
enum SeesawHandoff : int {
  kMax0Ready = 0,  // consumer 0 -> 1: block 2k's row maxima and factors
  kMax1Ready = 1,  // consumer 1 -> 0: block 2k + 1's row maxima and factors
  kP0Ready = 2,    // consumer 0 -> 1: P of block 2k in buffer 0's kpe panel
  kP1Ready = 3,    // consumer 1 -> 0: P of block 2k + 1 in buffer 1's kpe panel
  kNumHandoffs = 4,
};
// Named barrier (after traits.cuh's): both consumers, once a tile, the row sums of the last pair.
inline constexpr uint32_t kSumsReady = 3;

template <class Elt_>
struct SeesawTraits : MlaTileShape<plan::mla::kSeesawBlockKeys>, MlaEqualConsumers {
  using Elt = Elt_;
  using MmaElt = Elt;
  static_assert(std::is_same_v<Elt, __nv_bfloat16> || std::is_same_v<Elt, __half>,
                "mla: bf16 or fp16");
  static constexpr bool kFp8Cache = false;
  static constexpr bool kSeesaw = true;

  // Registers (MlaEqualConsumers): each consumer holds O (128), S / P in fp32 (32) and P's A
  // fragments (16) beside addresses.

  static constexpr int kHalfPanels = kLatentPanels / 2;  // one consumer's V columns
  // Two buffers: block 2k in buffer 0, 2k + 1 in buffer 1. P of a block (64 x 64 16-bit, one
  // panel) is parked in its buffer's kpe panel once that block's S is done: V never reads kpe.
  static constexpr int kStages = 2;
  static_assert(kKVPanelBytes == kTileRows * kRowBytes, "P fills one kpe panel");

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKVOffset = kQOffset + kQBytes;
  static constexpr uint32_t kRowOffset = kKVOffset + kStages * kStageBytes;
  // float [6][64]: running max and factor after block 2k (0, 1) and after block 2k + 1 (2, 3),
  // each consumer's row sums at the end (4, 5).
  static constexpr int kRowArrays = 6;
  static constexpr uint32_t kRowTableOffset = kRowOffset + kRowArrays * kTileRows * 4;
  static constexpr int kRowTables = 4;
  static constexpr uint32_t kBarrierOffset = kRowTableOffset + kRowTables * kBlockKeys * 8;
  // Per buffer: full of its owner's V half, full of the rest (the other V half and kpe), empty
  // of the owner's half (the owner's P V has read it), empty of the rest (the other consumer's
  // P V has read its V half and the parked P).
  static constexpr int kNumBarriers = 4 * kStages + kNumHandoffs;
  static constexpr uint32_t kSmemBytes = kBarrierOffset + kNumBarriers * 8;
  static constexpr uint32_t kSmemAlloc = kSmemBytes + 1024;
  static_assert(kSmemAlloc <= 232448, "shared memory: 227 KB per block");
};

// Views of the seesaw shared-memory plan (addresses from a 1024-aligned base).
template <class Traits>
struct SeesawPlan {
  // A pair's two tables are read by the copies of both blocks after both were published
  // (seesaw_loader.cuh), so block n's table is n % 4's: the next pair writes the other two.
  static constexpr int kRowTables = Traits::kRowTables;
  uint8_t* base;
  __device__ uint8_t* q() const { return base + Traits::kQOffset; }
  __device__ uint8_t* kv(uint32_t b) const {
    return base + Traits::kKVOffset + b * Traits::kStageBytes;
  }
  __device__ uint8_t* kpe_panel(uint32_t b) const {
    return kv(b) + Traits::kLatentPanels * Traits::kKVPanelBytes;
  }
  __device__ float* rows(int i) const {
    return reinterpret_cast<float*>(base + Traits::kRowOffset) + i * kTileRows;
  }
  __device__ int2* row_table(uint32_t t) const {
    return reinterpret_cast<int2*>(base + Traits::kRowTableOffset) + t * Traits::kBlockKeys;
  }
  __device__ uint64_t* barrier(int i) const {
    return reinterpret_cast<uint64_t*>(base + Traits::kBarrierOffset) + i;
  }
  __device__ uint64_t* full_own(uint32_t b) const { return barrier(b); }
  __device__ uint64_t* full_rest(uint32_t b) const { return barrier(2 + b); }
  __device__ uint64_t* empty_own(uint32_t b) const { return barrier(4 + b); }
  __device__ uint64_t* empty_rest(uint32_t b) const { return barrier(6 + b); }
  __device__ uint64_t* handoff(int h) const { return barrier(8 + h); }
};

}  // namespace hopattn::kernels::mla
