// Tile configuration, shared-memory plan, barrier names and kernel parameters of the MLA family.
// The tile shape comes from src/plan/mla_tiles.hpp, which the host planner reads too.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/device_status.hpp"
#include "kernels/common/fast_divisor.hpp"
#include "plan/mla_tiles.hpp"

namespace hopattn::kernels::mla {

using plan::mla::kLatentDim;
using plan::mla::kQkDim;
using plan::mla::kRopeDim;
using plan::mla::kTileRows;

// Named barrier ids (0 is __syncthreads). The handoffs of P, its row factors and the final row
// scales from consumer 0 to consumer 1 are mbarriers (tile.cuh, SharedPlan): release/acquire
// ordering that the race checker follows.
enum NamedBarrier : uint32_t {
  kQReady = 1,    // 256 consumer threads: Q landed in shared memory
  kProducer = 2,  // the producer warpgroup: a stage's row-address table is complete
};

// The MMA and shared-memory shape of a tile of 64 rows against blocks of kBlockKeys keys, shared
// by both schedules (MlaTraits, SeesawTraits).
template <int kBlockKeys_>
struct MlaTileShape {
  static constexpr int kBlockKeys = kBlockKeys_;
  static constexpr int kOCols = kLatentDim / 2;  // output columns of one consumer
  static constexpr int kSRegs = kBlockKeys / 2;  // 64 x kBlockKeys S accumulator
  static constexpr int kORegs = kOCols / 2;      // 64 x 256 O accumulator
  static constexpr int kQKSteps = kQkDim / 16;
  static constexpr int kPVSteps = kBlockKeys / 16;

  // Shared memory: 64-column panels of 128-byte rows, 128B-swizzled (16-byte chunk c of row r
  // at chunk c ^ (r % 8)), every panel on a 1024-byte boundary.
  static constexpr int kPanelCols = 64;
  static constexpr uint32_t kRowBytes = 128;
  static constexpr int kPanels = kQkDim / kPanelCols;  // 9: 8 of ckv, 1 of kpe
  static constexpr int kLatentPanels = kLatentDim / kPanelCols;
  static constexpr uint32_t kQPanelBytes = kTileRows * kRowBytes;
  static constexpr uint32_t kKVPanelBytes = kBlockKeys * kRowBytes;
  // Bytes from one panel of a stage to the next (the narrow schedule interleaves two stages
  // panel by panel: narrow_traits.cuh).
  static constexpr uint32_t kKVPanelStride = kKVPanelBytes;
  static constexpr uint32_t kQBytes = kQPanelBytes * kPanels;
  static constexpr uint32_t kStageBytes = kKVPanelBytes * kPanels;
  static constexpr bool kNarrow = false;  // narrow_traits.cuh's schedule
  // fp8: whether the producer only fills a ring of raw codes that the consumers read (loader.cuh,
  // run_fp8_raw) rather than widening them itself.
  static constexpr bool kRawRing = false;
  // Offset of a stage from the ring's start.
  __host__ __device__ static constexpr uint32_t stage_offset(uint32_t stage) {
    return stage * kStageBytes;
  }
};

// The CTA of every schedule: one producer warpgroup and two consumers, 384 threads at one CTA an
// SM, which hold 168 registers each at launch (ptxas -v); setmaxnreg then moves registers between
// the warpgroups within that allocation.
struct MlaRoles {
  static constexpr int kThreads = 384;
  static constexpr int kConsumerThreads = 256;
  static constexpr uint32_t kLaunchRegisters = 168;
};

// The register split of the schedules whose two consumers do the same work (seesaw, narrow): the
// producer keeps 56 (loads only), each consumer takes 224.
struct MlaEqualConsumers : MlaRoles {
  static constexpr uint32_t kProducerRegisters = 56;
  static constexpr uint32_t kConsumerRegisters = 224;
  static_assert(kProducerRegisters + 2 * kConsumerRegisters <= 3 * kLaunchRegisters,
                "register split: more than the CTA holds at launch");
};

// The element type of q, out and the 16-bit operands of the MMAs; the cache is Elt too, or
// float8 e4m3 (kFp8Cache), widened to Elt by the producer on its way to shared memory.
template <class Elt_, bool kFp8Cache_ = false>
struct MlaTraits : MlaTileShape<plan::mla::kBlockKeys>, MlaRoles {
  using Elt = Elt_;
  using MmaElt = Elt;  // the MMAs' operand type (narrow_traits.cuh may differ)
  static_assert(std::is_same_v<Elt, __nv_bfloat16> || std::is_same_v<Elt, __half>,
                "mla: bf16 or fp16");
  static constexpr bool kFp8Cache = kFp8Cache_;
  static constexpr bool kSeesaw = false;  // the two-block schedule is seesaw_traits.cuh's

  // One producer warpgroup (loads), two consumers: consumer 0 computes S = Q K^T, the softmax
  // and O[:, 0:256] += P V; consumer 1 computes O[:, 256:512] += P V with P from shared memory.
  // An fp8 cache's producer holds a whole block's loads in registers (72 of them) while it
  // waits for the stage, so it takes registers the 16-bit configuration leaves to consumer 1.
  // (ptxas -v: no spills at these counts; 128 / 216 / 160 spills 12 bytes.)
  static constexpr uint32_t kProducerRegisters = kFp8Cache ? 136 : 56;
  static constexpr uint32_t kConsumer0Registers = kFp8Cache ? 208 : 240;
  static constexpr uint32_t kConsumer1Registers = kFp8Cache ? 160 : 208;
  // setmaxnreg moves registers within the CTA's launch allocation: a warpgroup's .inc waits
  // until the others' .dec have returned enough, so counts over the launch total never start.
  static_assert(kProducerRegisters + kConsumer0Registers + kConsumer1Registers <=
                    3 * kLaunchRegisters,
                "register split: more than the CTA holds at launch");

  // Four 32-key stages rather than two of 64: a stage is freed only once both consumers' P V
  // of it is done, so with two the next block's load started one block late and the kernel
  // ran at ~5 us a 64-key block (latency-bound); measured 2026-12-01, docs/perf/mla.md.
  // An fp8 cache takes three: its codes first land in a ring of two raw blocks (below), fetched
  // two blocks ahead of their widening, and shared memory holds only three 16-bit stages beside.
  static constexpr int kStages = kFp8Cache ? 3 : 4;
  // fp8: raw 576-byte rows of a block, by cp.async (loader.cuh).
  static constexpr int kRawSlots = kFp8Cache ? 2 : 0;
  static constexpr uint32_t kRawRowBytes = kQkDim;
  static constexpr uint32_t kRawBytes = kBlockKeys * kRawRowBytes;
  static constexpr uint32_t kPBytes = kTileRows * kRowBytes;  // 64 x 64 16-bit

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKVOffset = kQOffset + kQBytes;
  static constexpr uint32_t kRawOffset = kKVOffset + kStages * kStageBytes;
  static constexpr uint32_t kPOffset = kRawOffset + kRawSlots * kRawBytes;
  static constexpr uint32_t kRowFactorOffset = kPOffset + kPBytes;  // float [64]
  static constexpr uint32_t kFinalOffset = kRowFactorOffset + kTileRows * 4;
  static constexpr uint32_t kRowTableOffset = kFinalOffset + kTileRows * 4;  // int64 [2][64]
  static constexpr uint32_t kBarrierOffset = kRowTableOffset + 2 * kBlockKeys * 8;
  // full[kStages], empty[kStages], then p_full, p_empty, final (consumer 0 -> 1 handoffs).
  static constexpr int kNumBarriers = 2 * kStages + 3;
  static constexpr uint32_t kSmemBytes = kBarrierOffset + kNumBarriers * 8;
  static constexpr uint32_t kSmemAlloc = kSmemBytes + 1024;  // room to align the base to 1 KB
  static_assert(kSmemAlloc <= 232448, "shared memory: 227 KB per block");
};

// Kernel parameters (host-filled in launch.cu). Element strides; every offset is int64.
struct MlaParams {
  // 16-bit cache with page_size % kBlockKeys == 0: ckv / kpe as 3-D maps (column, slot, page),
  // boxes of 64 columns x kBlockKeys slots, 128B-swizzled: one box is one stage panel, so a
  // block whose keys all exist arrives by 9 TMA copies (loader.cuh). Otherwise unused.
  CUtensorMap tm_ckv, tm_kpe;
  bool tma;
  const void* q_nope;  // [total_q, H, 512]
  const void* q_pe;    // [total_q, H, 64]
  int64_t q_nope_stride[2], q_pe_stride[2];
  const void* ckv;                       // pool [pages, page_size, 512]
  const void* kpe;                       // pool [pages, page_size, 64]
  int64_t ckv_stride[2], kpe_stride[2];  // page, slot
  int num_pages, page_size;
  FastDivisor page_div;
  const int* block_table;  // [B, max_pages] or null (CSR)
  int64_t block_table_stride;
  int64_t page_col_stride;  // between consecutive pages of a request (block table or indices)
  int max_pages;            // block table width (entries past a request's length are never read)
  const int* page_indptr;   // CSR [B + 1]
  int64_t page_indptr_stride;
  const int* page_indices;
  int64_t num_indices;  // CSR: page_indptr's offsets must lie in [0, num_indices]
  const int* kv_lens;   // [B]
  int64_t kv_lens_stride;
  const int* cu_seqlens_q;  // [B + 1]
  int64_t cu_seqlens_stride;
  int heads;
  FastDivisor head_div;
  bool causal;
  float scale_log2;  // softmax scale * log2(e), times the cache's dequantization scale
  float v_scale;     // cache dequantization scale applied to O (1 for 16-bit caches)
  // Output: out/lse when num_splits == 1, else the partial states.
  void* out;  // [total_q, H, 512]
  int64_t out_stride[2];
  float* lse;  // [total_q, H]
  int64_t lse_stride[2];
  int num_splits;
  float* partial_o;    // [splits, total_q, H, 512]
  float* partial_lse;  // [splits, total_q, H]
  int64_t total_q;
  // The device status word: the first bad device-resident index (page id, kv_len, page_indptr
  // or cu_seqlens_q entry) is recorded there (device_status.cuh).
  DeviceStatus* status;
};

}  // namespace hopattn::kernels::mla
