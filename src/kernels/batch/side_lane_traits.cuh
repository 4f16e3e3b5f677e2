// Geometry and traits of the batch family's side lane (side_lane.cuh), apart from its device code
// so that the host launch (launch.cu) can name the instance without compiling the kernel.
#pragma once

#include <cstdint>

#include "kernels/fwd/traits.cuh"
#include "plan/batch_tiles.hpp"

namespace hopattn::kernels::batch {

// Geometry of the side lane at head dim kD (16-bit elements).
template <int kD>
struct SideGeometry {
  static constexpr int kKeys = 16;                  // keys a block: the M of mma.sync
  static constexpr int kRows = plan::kSideMaxRows;  // rows: its N
  static constexpr int kThreads = 64;               // producer warps 2 and 3
  static constexpr int kChunks = kD / 8;            // 16-byte chunks a row
  // A row of K, V or q: its kD values and 16 bytes of padding, so that the 8 rows of an
  // ldmatrix matrix (consecutive rows, one 16-byte column) start in 8 different bank groups and
  // every address is a lane's row plus a constant column (a swizzle would take a register per
  // column a lane reads: ptxas spilled them).
  static constexpr uint32_t kRowBytes = kD * 2;  // the values: one bulk copy
  static constexpr uint32_t kRowStride = kRowBytes + 16;
  static constexpr uint32_t kBlockBytes = kKeys * kRowStride;
  static constexpr uint32_t kStageBytes = 2 * kBlockBytes;  // K rows, then V rows
  static constexpr uint32_t kQBytes = kRows * kRowStride;
  static constexpr int kKSteps = kD / 16;                  // k16 steps of S^T = K q^T
  static constexpr int kWarpTiles = kD / 16 / 2;           // each warp's 16-feature tiles of O^T
  static constexpr int kRowsPerPass = kThreads / kChunks;  // block rows one copy round covers
  static constexpr int kPasses = kKeys / kRowsPerPass;
  static_assert(kD % 32 == 0 && kThreads % kChunks == 0 && kKeys % kRowsPerPass == 0,
                "side lane: whole rows per copy round");
  static_assert(kRowsPerPass * kPasses == kKeys, "side lane: every key row copied once");

  // Byte offset of 16-byte chunk c of row r.
  __device__ static uint32_t at(uint32_t base, int r, int c) {
    return base + static_cast<uint32_t>(r) * kRowStride + static_cast<uint32_t>(c) * 16;
  }
};

// The fwd kernel's traits with a side lane: the producer warpgroup keeps 56 registers (the side
// warps' O^T, S^T and softmax state; the consumers then get 224, as the fp8 instances split them),
// and the side lane's q rows and ring follow the fwd kernel's shared memory, with as many stages
// as the 227 KB leave (head dim 128: 3, head dim 64: 8).
template <class Base>
struct SideLaneTraits : Base {
  static_assert(!Base::kFp8KV, "side lane: 16-bit caches (the fp8 instances' warps 1..3 widen)");
  static_assert(Base::kHeadDim == Base::kHeadDimV && Base::kHeadDim <= plan::kSideMaxHeadDim,
                "side lane: Dqk = Dv <= 128");
  static_assert(Base::kConsumerWarpgroups == 2, "side lane: the two-consumer kernel");
  using Side = SideGeometry<Base::kHeadDim>;
  static constexpr uint32_t kProducerRegisters = 56;
  static constexpr uint32_t kConsumerRegisters = 224;
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * Base::kConsumerThreads <=
                    Base::kLaunchRegisters * Base::kThreads,
                "side lane: the register split exceeds the launch's allocation");
  static constexpr uint32_t kSideOffset = (Base::kSmemBytes + 127) / 128 * 128;
  static constexpr uint32_t kSideRingOffset = kSideOffset + Side::kQBytes;
  static constexpr uint32_t kSmemLimit = 227 * 1024 - 1024;  // kSmemAlloc's alignment slack
  static constexpr int kSideStagesFit =
      static_cast<int>((kSmemLimit - kSideRingOffset) / (Side::kStageBytes + 8));
  static constexpr int kSideStages = kSideStagesFit > 8 ? 8 : kSideStagesFit;
  static_assert(kSideRingOffset <= kSmemLimit && kSideStages >= 3,
                "side lane: two blocks in flight while one is read");
  // A full barrier a stage (its bulk copies' bytes), after the ring.
  static constexpr uint32_t kSideBarOffset = kSideRingOffset + kSideStages * Side::kStageBytes;
  static constexpr uint32_t kSmemBytes = kSideBarOffset + kSideStages * 8;
  static constexpr uint32_t kSmemAlloc = kSmemBytes + 1024;
  static_assert(kSmemAlloc <= 227 * 1024, "side lane: shared-memory plan exceeds 227 KB");
};

// Whether the fwd row Traits has a side-lane instance (SideLaneTraits' conditions).
template <class Traits>
inline constexpr bool kHasSideLane =
    !Traits::kFp8KV && Traits::kHeadDim == Traits::kHeadDimV &&
    Traits::kHeadDim <= plan::kSideMaxHeadDim && Traits::kConsumerWarpgroups == 2;

}  // namespace hopattn::kernels::batch
