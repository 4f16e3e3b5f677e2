// Tile configuration, shared-memory plan, barrier names and kernel parameters of the fwd family.
// Every constant the kernel and the host launcher (or a planner) need lives here, once.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/device_status.hpp"
#include "kernels/common/fast_divisor.hpp"
#include "plan/batch_plan_layout.hpp"

namespace hopattn::kernels::fwd {

// Named barrier ids (0 is __syncthreads). Consumer warpgroup c (0 .. kConsumerWarpgroups - 1,
// at most kMaxConsumers) waits for its turn to issue GEMMs on kGemmTurn0 + c and hands the turn
// to the next one in the ring; it synchronizes its own 128 threads around the output staging
// buffer on kEpilogue0 + c.
inline constexpr int kMaxConsumers = 3;
enum NamedBarrier : uint32_t {
  kGemmTurn0 = 1,
  kEpilogue0 = kGemmTurn0 + kMaxConsumers,
  kVTail = kEpilogue0 + kMaxConsumers,  // every consumer, once its zeros over a V tail are written
  kSideLane = kVTail + 1,  // the batch side lane's two warps, once a block (batch/side_lane.cuh)
  kGatherIds = kSideLane + 1,  // the 16-bit gather warps, once a block's page ids are staged
  // Both consumers of a split tile (mainloop.cuh, compute_split), around the exchange of
  // consumer 1's state.
  kSplitMerge = kGatherIds + 1,
};

// Elt: __nv_bfloat16 or __half (q, k, v, o). kHeadDim = Dqk, kHeadDimV = Dv, multiples of 64
// (one 128-byte swizzled panel per 64 columns). kOInQ: each consumer stages its O rows in the
// rows of Q it read (Q is dead once its last S = Q K^T GEMM of the tile has completed), which
// frees 32 KB per consumer for longer KV tiles; the next tile's Q then waits for the O stores
// (README.md, "Output staging in Q").
// kFp8KV: K and V come from a paged cache of fp8 e4m3 codes, which the gather warps widen exactly
// to Elt in the stages (kv_loader.cuh, copy_codes and widen_codes); their scales apply to the
// logits and to the output (KVScaleParams). The batch family's instances only.
template <class Elt_, int kHeadDim_, int kHeadDimV_ = kHeadDim_, int kBlockN_ = 128,
          int kStages_ = 2, bool kOInQ_ = false, bool kFp8KV_ = false, int kConsumers_ = 2>
struct FwdTraits {
  using Elt = Elt_;
  static constexpr bool kFp8KV = kFp8KV_;
  // fp8 codes can come by TMA (KVSource::kPagedTmaWiden) when a row's codes fill whole 128-byte
  // panel rows (head dims >= 128); hd64's 64 would land 64 bytes apart, not 128.
  static constexpr bool kTmaCodes = kFp8KV && kHeadDim_ >= 128 && kHeadDimV_ >= 128;
  // With codes by TMA, a tile whose rows all lie in consumer 0's 64 (a batch decode item) leaves
  // consumer 1 without GEMMs: it widens each block's V codes then, and warps 1..3 only K
  // (mainloop.cuh, widen_v_or_arrive). Dv <= 128 only: at 256 the consumers spilled.
  static constexpr bool kConsumerWidensV = kTmaCodes && kHeadDimV_ <= 128;
  static_assert(std::is_same_v<Elt, __nv_bfloat16> || std::is_same_v<Elt, __half>,
                "fwd: bf16 or fp16");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockN = kBlockN_;  // keys per KV tile
  static constexpr int kStages = kStages_;  // depth of the K and V rings
  static_assert(kHeadDim % 64 == 0 && kHeadDimV % 64 == 0, "head dims: multiples of 64");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "kBlockN: multiple of 16, at most 256");
  static constexpr bool kOInQ = kOInQ_;
  static_assert(!kOInQ || kHeadDimV <= kHeadDim, "O staged in Q: needs Dv <= Dqk");

  // One producer warpgroup, two (or three: configs.hpp) consumer warpgroups of 64 query rows
  // each. With a gathered (paged) KV cache, warps 1..3 of the producer warpgroup copy K and V
  // rows.
  static constexpr int kGatherThreads = 96;
  static constexpr int kConsumerWarpgroups = kConsumers_;
  static_assert(kConsumers_ >= 2 && kConsumers_ <= kMaxConsumers, "fwd: 2 or 3 consumers");
  static_assert(kConsumers_ == 2 || !kFp8KV_, "fwd: fp8 instances (batch) take 2 consumers");
  static constexpr int kRowsPerConsumer = 64;  // the M of wgmma
  static constexpr int kBlockM = kConsumerWarpgroups * kRowsPerConsumer;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = 128 + kConsumerThreads;
  // 384 threads at one block per SM start at 168 registers; the producer gives most of its
  // share to the consumers: 128 * 24 + 256 * 240 = 168 * 384. Consumers at 232 (a producer of 32,
  // spill-free paged paths) ran 4-10% slower on dense and paged shapes (H200, A/B in one run,
  // 2026-12-01): the consumers' schedule wants the registers more than the producer's few
  // spilled bytes cost.
  // An fp8 cache's gather warps also widen the codes and keep four page ids in flight
  // (kv_loader.cuh, copy_codes): 56 / 224.
  // Three consumers (512 threads, 128 registers each at launch): 128 * 32 + 384 * 160.
  static constexpr uint32_t kProducerRegisters = kFp8KV ? 56 : kConsumers_ == 3 ? 32 : 24;
  static constexpr uint32_t kConsumerRegisters = kConsumers_ == 3 ? 160 : kFp8KV ? 224 : 240;
  static constexpr uint32_t kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * kConsumerThreads <=
                    kLaunchRegisters * kThreads,
                "fwd: the register split exceeds the launch's allocation");

  // Register tiles of one consumer thread.
  static constexpr int kSRegs = kBlockN / 2;      // S = Q K^T accumulator, 64 x kBlockN
  static constexpr int kORegs = kHeadDimV / 2;    // O accumulator, 64 x kHeadDimV
  static constexpr int kPSteps = kBlockN / 16;    // k16 steps of O += P V (4 registers each)
  static constexpr int kQKSteps = kHeadDim / 16;  // k16 steps of S = Q K^T

  // Shared memory: every tile is stored as 64-column panels of 128-byte rows, 128B-swizzled by
  // TMA; each panel starts on a 1024-byte boundary so descriptors need no base offset.
  static constexpr int kPanelCols = 64;
  static constexpr uint32_t kRowBytes = 128;
  static constexpr uint32_t kQPanelBytes = kBlockM * kRowBytes;
  static constexpr uint32_t kKVPanelBytes = kBlockN * kRowBytes;
  static constexpr uint32_t kOPanelBytes = kRowsPerConsumer * kRowBytes;
  static constexpr uint32_t kQBytes = kQPanelBytes * (kHeadDim / kPanelCols);
  static constexpr uint32_t kKStageBytes = kKVPanelBytes * (kHeadDim / kPanelCols);
  static constexpr uint32_t kVStageBytes = kKVPanelBytes * (kHeadDimV / kPanelCols);
  static constexpr uint32_t kOBytesPerConsumer = kOPanelBytes * (kHeadDimV / kPanelCols);

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKStageBytes;
  static constexpr uint32_t kVEnd = kVOffset + kStages * kVStageBytes;
  // O staging of consumer c, panel i (64 rows x 128 B): in its own buffer after V, panels
  // kOPanelBytes apart; or (kOInQ) over Q rows 64c .. 64c + 63 of Q panel i, exactly the bytes
  // consumer c's S GEMMs read, so that neither consumer overwrites Q the other still reads.
  static constexpr uint32_t kOOffset = kOInQ ? kQOffset : kVEnd;
  static constexpr uint32_t kOConsumerBytes = kOInQ ? kOPanelBytes : kOBytesPerConsumer;
  static constexpr uint32_t kOPanelStride = kOInQ ? kQPanelBytes : kOPanelBytes;
  static constexpr uint32_t kBarrierOffset =
      kOInQ ? kVEnd : kOOffset + kConsumerWarpgroups * kOBytesPerConsumer;
  // q_full, q_empty, then k_full, k_empty, v_full, v_empty, job_full rings; kFp8KV: k_raw and
  // v_raw rings too (kPagedTmaWiden: a stage's codes landed by TMA).
  static constexpr int kNumBarriers = 2 + (kFp8KV ? 7 : 5) * kStages;
  // Paged gather: one job slot per stage (kv_loader.cuh).
  static constexpr uint32_t kJobOffset = (kBarrierOffset + kNumBarriers * 8 + 15) / 16 * 16;
  static constexpr uint32_t kJobBytes = 16;
  // A bad page id a producer warp met: one 8-byte note per producer warp (kv_loader.cuh).
  static constexpr uint32_t kNoteOffset = kJobOffset + kStages * kJobBytes;
  static constexpr int kProducerWarps = 4;
  static constexpr uint32_t kNoteBytes = kProducerWarps * 8;
  // A bad device-resident index the consumers met at a tile start (mask.cuh report_index).
  static constexpr uint32_t kIndexNoteOffset = kNoteOffset + kNoteBytes;
  // Paged gather: the page ids of each stage's KV block, staged once by the gather warps for
  // K's and V's copies (kv_loader.cuh, block_page_ids).
  static constexpr uint32_t kPageIdOffset =
      (kIndexNoteOffset + sizeof(DeviceStatus) + 15) / 16 * 16;
  static constexpr uint32_t kPageIdBytes = kBlockN * 4;
  static constexpr uint32_t kSmemBytes = kPageIdOffset + kStages * kPageIdBytes;
  // Dynamic shared memory is only 16-byte aligned: ask for slack to align the base to 1024.
  static constexpr uint32_t kSmemAlloc = kSmemBytes + 1024;
  static_assert(kSmemAlloc <= 227 * 1024, "fwd: shared-memory plan exceeds 227 KB");
};

// One KV block to gather from a paged cache, handed from the producer thread to the gather warps
// through shared memory (kv_loader.cuh). n_block < 0: no more blocks.
struct GatherJob {
  int batch;  // the request (its page list is looked up by the gather warps)
  int seqlen_k;
  int kv_head;
  int n_block;
};
static_assert(sizeof(GatherJob) == 16, "GatherJob: one 16-byte shared load");
// Set in a kPagedTmaWiden job's kv_head (which the widening warps do not otherwise read): consumer
// 1 widens this block's V codes, warps 1..3 only arrive on v_full.
inline constexpr int kVWidenedByConsumer = 1 << 30;

// Views of the shared-memory plan (addresses from a 1024-aligned base).
template <class Traits>
struct SharedPlan {
  uint8_t* base;
  __device__ uint8_t* q() const { return base + Traits::kQOffset; }
  __device__ uint8_t* k(int stage) const {
    return base + Traits::kKOffset + stage * Traits::kKStageBytes;
  }
  __device__ uint8_t* v(int stage) const {
    return base + Traits::kVOffset + stage * Traits::kVStageBytes;
  }
  // Panel i of consumer c's O staging is at o(c) + i * Traits::kOPanelStride.
  __device__ uint8_t* o(int consumer) const {
    return base + Traits::kOOffset + consumer * Traits::kOConsumerBytes;
  }
  __device__ uint64_t* barriers() const {
    return reinterpret_cast<uint64_t*>(base + Traits::kBarrierOffset);
  }
  __device__ uint64_t* q_full() const { return barriers(); }
  __device__ uint64_t* q_empty() const { return barriers() + 1; }
  __device__ uint64_t* k_full(int s) const { return barriers() + 2 + s; }
  __device__ uint64_t* k_empty(int s) const { return barriers() + 2 + Traits::kStages + s; }
  __device__ uint64_t* v_full(int s) const { return barriers() + 2 + 2 * Traits::kStages + s; }
  __device__ uint64_t* v_empty(int s) const { return barriers() + 2 + 3 * Traits::kStages + s; }
  __device__ uint64_t* job_full(int s) const { return barriers() + 2 + 4 * Traits::kStages + s; }
  __device__ uint64_t* k_raw(int s) const { return barriers() + 2 + 5 * Traits::kStages + s; }
  __device__ uint64_t* v_raw(int s) const { return barriers() + 2 + 6 * Traits::kStages + s; }
  __device__ GatherJob* job(int s) const {
    return reinterpret_cast<GatherJob*>(base + Traits::kJobOffset + s * Traits::kJobBytes);
  }
  // Producer warp w's note of a bad page id: {request + 1, page id}, {0, 0} when none.
  __device__ int2* bad_page_note(int warp) const {
    return reinterpret_cast<int2*>(base + Traits::kNoteOffset) + warp;
  }
  // Stage s's page ids (paged gather): entry i for the block's i-th page-list entry.
  __device__ int* page_ids(int s) const {
    return reinterpret_cast<int*>(base + Traits::kPageIdOffset + s * Traits::kPageIdBytes);
  }
  // The consumers' note of a bad device-resident index (tag 0 when none).
  __device__ DeviceStatus* index_note() const {
    return reinterpret_cast<DeviceStatus*>(base + Traits::kIndexNoteOffset);
  }
};

// ------------------------------------------------------------------------------ parameters
// All tensors are viewed as 4-D [B, S, H, D] by TMA (dims innermost first: D, H, S, B). Varlen
// tensors are [1, total, H, D] and a sequence's rows start at cu_seqlens[b] along S.
struct SequenceParams {
  int batch = 0;
  int seqlen_q = 0, seqlen_k = 0;     // dense lengths
  const int* cu_seqlens_q = nullptr;  // device int32 [B + 1]; null for dense
  const int* cu_seqlens_k = nullptr;
  int total_q = 0, total_k = 0;  // varlen: rows of q and of k, the bounds of cu_seqlens entries
};

struct MaskParams {
  int window_left = -1;   // keys left of the diagonal a query sees; -1: unbounded
  int window_right = -1;  // keys right of the diagonal; causal = 0; -1: unbounded
};

struct SoftmaxParams {
  float scale_log2 = 0.f;        // log2(e) * scale, or log2(e) * softcap with a softcap
  float softcap_scale = 0.f;     // != 0: logits become tanh(s * softcap_scale) (= scale / softcap)
  const float* sinks = nullptr;  // device fp32 [Hq] or null
  int64_t sinks_stride = 1;      // elements from one q head's sink to the next (any sign)
};

// Scales of the KV cache (real value = stored * scale; an fp8 cache's dequantization). A
// per-tensor k scale is folded into SoftmaxParams by the host; per-head scales (device fp32
// [Hkv]) are read per tile; the v scale multiplies the output.
struct KVScaleParams {
  float v = 1.f;
  const float* k_per_head = nullptr;  // replaces the folded per-tensor k scale
  const float* v_per_head = nullptr;  // replaces v
};

struct OutputParams {
  // Direct stores (LSE always; O rows of a varlen tile that ends inside the tile), in elements.
  void* o = nullptr;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  float* lse = nullptr;
  int64_t lse_batch_stride = 0, lse_row_stride = 0, lse_head_stride = 0;
};

// Where K and V rows come from. kContiguous: dense or varlen tensors by TMA. kPagedTma: page
// pools by TMA, one box of `box_rows` tokens (a divisor of both the page size and kBlockN, a
// multiple of 8) at a time. kPagedGather: page pools by cp.async from the 96 threads of producer
// warps 1..3, 16 bytes at a time, for page sizes that share no multiple of 8 with kBlockN.
enum class KVSource : int {
  kContiguous = 0,
  kPagedTma = 1,
  kPagedGather = 2,
  // kFp8KV only: the pools' fp8 codes by TMA boxes as kPagedTma (each row's codes into the bytes
  // its widened values will occupy), widened in place by producer warps 1..3.
  kPagedTmaWiden = 3,
};

// Gather addressing of one pool (elements): row (page, slot, head) starts at
// page * page_stride + slot * slot_stride + head * head_stride. The host checks that a page
// spans fewer than 2^31 elements and page_stride < 2^32, so that only the page term is 64-bit.
struct PoolParams {
  const void* base = nullptr;
  uint32_t page_stride = 0, slot_stride = 0, head_stride = 0;
};

struct KVParams {
  KVSource source = KVSource::kContiguous;
  // Varlen and paged TMA: a tile's last KV block arrives with whatever lies past the sequence's
  // end (the next sequence's rows, a page's unused slots): the consumers zero those V rows
  // (FwdMainloop::zero_v_tail). Dense and gathered blocks arrive with zeros there already.
  bool zero_v_tail = false;
  // Paged: lengths and page lists on the device (block table rows, or CSR).
  const int* kv_lens = nullptr;      // int32 [B]
  const int* block_table = nullptr;  // int32 [B, max_pages] rows block_table_stride apart; or
  int64_t block_table_stride = 0;
  const int* page_indptr = nullptr;  // int32 [B + 1] and
  const int* page_indices = nullptr;
  int page_size = 0;
  // Bounds of the device-resident page lists (make_tile_info, kv_loader.cuh): pages in each
  // pool, a block table row's entries, page_indices' entries.
  int num_pages = 0, pages_per_row = 0, num_page_indices = 0;
  FastDivisor page_div;       // by page_size
  int box_rows = 0;           // kPagedTma: tokens per TMA box
  bool hnd = false;           // pools are [P, Hkv, page_size, D]; else [P, page_size, Hkv, D]
  PoolParams k_pool, v_pool;  // kPagedGather
};

// GQA packing: with pack = g > 1 (the GQA group), a work tile's rows are (q position, q head of
// the group) pairs of one KV head: tile row r is q position q_start + r / g of q head
// kv_head * g + r % g, for `positions` = floor(128 / g) positions per tile (rows past
// positions * g stay unused when g does not divide 128). Every K/V block is then read once for
// the whole group, and short q lengths still fill the tile. Q arrives by one TMA box per panel over
// (64 columns, g heads, positions), which lands exactly as rows q_pos * g + h; O is stored by a TMA
// box of (64, g, 64 / g) when g divides the 64 rows of a consumer (`o_by_tma`), otherwise with
// plain 16-byte stores. pack = 1, positions = 128: one q head per tile, as without GQA.
struct PackParams {
  int pack = 1;
  int positions = 128;   // q positions per tile (kBlockM / pack, rounded down)
  FastDivisor pack_div;  // by pack: tile row -> position offset
  uint32_t q_bytes = 0;  // bytes of the Q boxes of one tile (pack * positions rows)
  bool o_by_tma = true;
};

struct SchedulerParams {
  int num_m_blocks = 0;  // ceil(max_seqlen_q / positions per tile); even when paired
  int num_heads = 0;     // Hq, or Hkv with GQA packing (a work tile's `head`)
  int batch = 0;
  int section_bh = 1;  // (batch, head) pairs per L2 section
  int total_tiles = 0;
  // m-blocks in heavy + light pairs (plan/fwd_order.hpp, tile_scheduler.cuh): the walk goes
  // over units of two tiles, num_m_blocks / 2 units a (batch, head) pair.
  bool paired = false;
  // Divisions of the tile (paired: unit) index (tile_scheduler.cuh), set by set_divisors() from
  // the fields above: by the tiles (units) of a section, by section_bh, by the last section's
  // pairs, by num_heads.
  FastDivisor per_section, section, last_section, heads;

  int ranks() const { return paired ? num_m_blocks / 2 : num_m_blocks; }
  void set_divisors() {
    const int bh_total = num_heads * batch;
    const int last = bh_total - (bh_total - 1) / section_bh * section_bh;
    per_section = FastDivisor::of(static_cast<uint32_t>(ranks() * section_bh));
    section = FastDivisor::of(static_cast<uint32_t>(section_bh));
    last_section = FastDivisor::of(static_cast<uint32_t>(last));
    heads = FastDivisor::of(static_cast<uint32_t>(num_heads));
  }
};

// The batch family's launch (src/kernels/batch/): the device copy of a plan's work lists and the
// partial-state rows of its split items. Null in fwd calls.
struct BatchWorkParams {
  const plan::BatchPlanHeader* header = nullptr;  // the plan's start
  // Group 0's lists (plan/batch_plan_layout.hpp): [group_ctas + 1] offsets into its items. CTA c
  // runs the list of CTA c % group_ctas as KV-head group c / group_ctas.
  const int32_t* cta_offsets = nullptr;
  const plan::BatchWorkItem* items = nullptr;
  FastDivisor group_ctas;
  // The CTAs of each group that run their lists, [cta_first, cta_last); the others run none (the
  // concurrent form's tail: its prefill plan runs in two launches, batch_plan.hpp).
  int cta_first = 0, cta_last = 1 << 30;
  float* partial_o = nullptr;    // fp32 [rows][Dv]
  float* partial_lse = nullptr;  // fp32 [rows]
  // q as plain rows for the side lane (batch/side_lane.cuh), which loads its few rows without
  // TMA: element (row, head, d) at q + row * q_row_stride + head * q_head_stride + d.
  const void* q = nullptr;
  int64_t q_row_stride = 0, q_head_stride = 0;
  // A placed launch (batch/placement.cuh), where sm_rank is set: the CTAs take their lists by
  // %smid. sm_rank[placed_sms]: each SM's rank in the order (the first decode_sms SMs are left
  // to the decodes); claims: the decode SMs' exit count, then one bit a slot (placed_sms -
  // decode_sms slots: placed_lists prefill lists of each group).
  const int16_t* sm_rank = nullptr;
  uint32_t* claims = nullptr;
  int placed_sms = 0, decode_sms = 0, placed_lists = 1;
};

struct FwdParams {
  CUtensorMap tm_q, tm_k, tm_v, tm_o;
  SequenceParams seq;
  KVParams kv;
  MaskParams mask;
  SoftmaxParams softmax;
  KVScaleParams kv_scale;
  OutputParams out;
  SchedulerParams sched;
  PackParams pack;
  int heads_q = 0, heads_kv = 0, group = 1;  // group = Hq / Hkv (GQA)
  // A work tile's KV head is its head / kv_head_divisor: group, or 1 with GQA packing (whose
  // tiles are per KV head).
  int kv_head_divisor = 1;
  BatchWorkParams batch;
  // Where a bad device-resident index is recorded (kernels/common/device_status.cuh), as
  // `status_family` (fwd, or batch for the batch family's launches of this kernel).
  DeviceStatus* status = nullptr;
  StatusFamily status_family = StatusFamily::kFwd;
};

}  // namespace hopattn::kernels::fwd
