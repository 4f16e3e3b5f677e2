// Tile configuration, shared-memory plan, barrier names and kernel parameters of the bwd family.
// Every constant the kernels and the host launcher need lives here (and, for the workspace and
// the block geometry, in workspace.hpp, which host code without CUDA reads too).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/device_status.hpp"
#include "kernels/bwd/workspace.hpp"
#include "kernels/common/offset_range.hpp"

namespace hopattn::kernels::bwd {

// Named barrier ids (0 is __syncthreads). The dS (and P) buffer of a step is complete:
// kDsWritten when both MMA warpgroups' GEMMs read all of it (256 threads); kDsWrittenWg0 + w when
// warpgroup w reads only its own rows (head dim 64, 128 threads).
enum NamedBarrier : uint32_t {
  kDsWritten = 1,
  kDsWrittenWg0 = 2,
  kDsWrittenWg1 = 3,
  kDqAdded = 4,     // dQ from registers, deterministic: all 256 MMA threads' reductions fenced
  kTailZeroed = 5,  // varlen: rows past a sequence's end zeroed in a K/V block or a Q/dO stage
  kDqStaged0 = 6,   // folded dQ (Dqk 64): warpgroup 0's half staged in buffer 0, warpgroup 1 adds
  kDqStaged1 = 7,   // the same in buffer 1
};

// Elt: __nv_bfloat16 or __half. kHeadDim = Dqk, kHeadDimV = Dv (multiples of 64: one 128-byte
// swizzled panel per 64 columns).
//
// Two ways to share a CTA's work between its two MMA warpgroups (240 registers each), picked by
// head dim; the step code is the same up to the dK/dV GEMMs.
//
// Split by keys (Dqk <= 128, kSharedKeys = false): 128 keys per CTA, warpgroup w owns keys
// 64w..64w+63. S^T and dP^T are m64n64 (32 + 32 registers), P^T and dS^T become A fragments
// (16 + 16), dV += P^T dO and dK += dS^T Q are RS with dK, dV of 64 keys x D in registers
// (D / 2 + D / 2). At 128: 64 + 64 + 32 + 32 = 192 in the score phase, then 64 + 64 + 16 + 16
// + 32 (one dQ panel) = 192. At (192, 128) it would be 96 + 64 + 64 = 224 before any address or
// index, and at 256, 128 + 128 = 256: neither fits.
//
// Split by columns (Dqk > 128, kSharedKeys = true): 64 keys per CTA, both warpgroups see all of
// them. Warpgroup w computes S^T and dP^T for q columns 32w..32w+31 (m64n32: 16 + 16 registers),
// writes its P^T and dS^T columns to shared memory, and after a 256-thread barrier runs the dV
// and dK GEMMs SS (A = P^T or dS^T of all 64 q rows, K-major [key][q]; B = dO or Q) for the
// 64-column panels p = w, w + 2, ... of dV and dK (one m64n64 accumulator, 32 registers each).
// dQ panels go the other way round (p = 1 - w, 3 - w, ...), which balances (192, 128): warpgroup
// 0 gets dK panels 0, 2 and dQ panel 1, warpgroup 1 dK panel 1 and dQ panels 0, 2; each also runs
// one spare panel GEMM whose result is dropped (issued_panel).
//   registers (one thread): 256: dK 2 x 32 + dV 2 x 32 = 128 held; + S^T, dP^T 16 + 16 in the
//   score phase; + dQ 2 x 32 = 64 after it (S^T, dP^T dead) -> 192 peak. (192, 128): dK 64,
//   dV 32, dQ 64 -> 160 peak.
//   shared memory: 256, one stage: K 32 KB + V 32 KB + Q 32 KB + dO 32 KB + dS^T 2 x 8 KB +
//   P^T 2 x 8 KB + dQ staging 2 warpgroups x 2 panels x 16 KB = 224 KB, + row stats and barriers
//   + 1 KB alignment slack = 225.6 KB of 227 (a second Q/dO stage would need 64 KB more: dQ
//   would have to leave through registers instead of the staging buffer). (192, 128), two
//   stages: K 24 + V 16 + Q 2 x 24 + dO 2 x 16 + dS^T 16 + P^T 16 + dQ 64 = 216 KB (+ 2 KB).
//   kStages is the deepest ring that fits.
template <class Elt_, int kHeadDim_, int kHeadDimV_ = kHeadDim_>
struct BwdTraits {
  using Elt = Elt_;
  static_assert(std::is_same_v<Elt, __nv_bfloat16> || std::is_same_v<Elt, __half>,
                "bwd: bf16 or fp16");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static_assert(kHeadDim % 64 == 0 && kHeadDimV % 64 == 0, "head dims: multiples of 64");
  static constexpr bool kSharedKeys = bwd::shares_keys(kHeadDim);

  // One producer warpgroup (warp 0 loads, warp 1 writes dQ), two MMA warpgroups. The main loop
  // walks q tiles of kBlockM rows.
  static constexpr int kBlockM = bwd::kBlockM;
  static constexpr int kBlockN = bwd::block_n_for(kHeadDim);
  static constexpr int kMmaWarpgroups = 2;
  static constexpr int kMmaThreads = 128 * kMmaWarpgroups;
  static constexpr int kThreads = 128 + kMmaThreads;
  static_assert(kBlockM == 64, "kBlockM: one 128-byte panel of dS^T per key row");
  // 384 threads at one block per SM start at 168 registers: 128 * 24 + 256 * 240 = 168 * 384.
  static constexpr uint32_t kProducerRegisters = 24;
  static constexpr uint32_t kMmaRegisters = 240;

  // The block's key rows and q columns of warpgroup w's S^T and dP^T (keys are the wgmma M: 64).
  static constexpr int kSCols = kSharedKeys ? kBlockM / 2 : kBlockM;  // the N of S^T, dP^T
  __host__ __device__ static constexpr int key_row0(int w) { return kSharedKeys ? 0 : 64 * w; }
  __host__ __device__ static constexpr int s_col0(int w) { return kSharedKeys ? kSCols * w : 0; }

  // Register tiles of one MMA thread (accumulators m64nN hold N / 2 floats per thread).
  static constexpr int kSRegs = kSCols / 2;       // S^T = K Q^T and dP^T = V dO^T
  static constexpr int kSSteps = kSCols / 16;     // k16 fragments of P^T and dS^T
  static constexpr int kMSteps = kBlockM / 16;    // k16 steps of dV += P^T dO and dK += dS^T Q
  static constexpr int kQKSteps = kHeadDim / 16;  // k16 steps of S^T = K Q^T
  static constexpr int kVSteps = kHeadDimV / 16;  // k16 steps of dP^T = V dO^T
  static constexpr int kQKPanels = kHeadDim / 64;
  static constexpr int kVPanels = kHeadDimV / 64;
  // dK and dV accumulators: slots of kKvSlotCols columns. By keys one slot of the whole width;
  // by columns one 64-column panel per slot, slot i of warpgroup w being panel 2i + w.
  static constexpr int kDkSlots = kSharedKeys ? (kQKPanels + 1) / 2 : 1;
  static constexpr int kDvSlots = kSharedKeys ? (kVPanels + 1) / 2 : 1;
  static constexpr int kDkRegs = (kSharedKeys ? 64 : kHeadDim) / 2;  // per slot
  static constexpr int kDvRegs = (kSharedKeys ? 64 : kHeadDimV) / 2;
  __host__ __device__ static constexpr int kv_panel(int w, int slot) {
    return kSharedKeys ? 2 * slot + w : 0;
  }

  // Whether a slot's panel exists: only the last slot of an odd panel count can be spare, so for
  // even counts this is a compile-time true and costs no branch around the wgmma.
  __host__ __device__ static constexpr bool has_panel(int panel, int panels) {
    return panels % 2 == 0 || panel < panels;
  }
  // The panel a slot's GEMM reads: a spare slot (Dqk 192: dK slot 1 of warpgroup 1, dQ slot 1 of
  // warpgroup 0) recomputes the panel two below into its unused accumulator. A branch around the
  // wgmma instead makes ptxas fence the warpgroup before every later one (C7519 notes).
  __host__ __device__ static constexpr int issued_panel(int panel, int panels) {
    return has_panel(panel, panels) ? panel : panel - 2;
  }

  // dQ = dS K, one m64n64 accumulator per slot. By keys (Dqk 64; half of 64 columns is no
  // 128-byte panel): each warpgroup computes the one panel over its own 64 keys and both add into
  // the same floats. Otherwise slot i of warpgroup w is panel 2i + w (by keys, Dqk 128) or
  // 2i + 1 - w (by columns), over all the block's keys; panels >= kQKPanels are skipped.
  static constexpr bool kDqByKeys = kHeadDim <= 64;
  static constexpr int kDqSlots = kDqByKeys ? 1 : (kQKPanels + 1) / 2;
  static constexpr int kDqRegs = kDqPanelCols / 2;                 // per slot
  static constexpr int kNSteps = (kDqByKeys ? 64 : kBlockN) / 16;  // k16 steps of dQ
  __host__ __device__ static constexpr int dq_panel(int w, int slot) {
    return kDqByKeys ? 0 : 2 * slot + (kSharedKeys ? 1 - w : w);
  }

  // Shared memory: tiles are stored as 64-column panels of 128-byte rows, 128B-swizzled (by TMA,
  // or by the MMA warpgroups for dS and P); each panel starts on a 1024-byte boundary.
  static constexpr int kPanelCols = 64;
  static constexpr uint32_t kRowBytes = 128;
  static constexpr uint32_t kKVPanelBytes = kBlockN * kRowBytes;  // K, V: [key][64 cols]
  static constexpr uint32_t kQPanelBytes = kBlockM * kRowBytes;   // Q, dO: [row][64 cols]
  static constexpr uint32_t kDsBytes = kBlockN * kRowBytes;  // dS^T: [key][64 q rows], one panel
  static constexpr uint32_t kPBytes = kSharedKeys ? kDsBytes : 0;  // P^T, by columns only
  static constexpr uint32_t kKBytes = kKVPanelBytes * kQKPanels;
  static constexpr uint32_t kVBytes = kKVPanelBytes * kVPanels;
  static constexpr uint32_t kQStageBytes = kQPanelBytes * kQKPanels;
  static constexpr uint32_t kDoStageBytes = kQPanelBytes * kVPanels;
  static constexpr uint32_t kDqPanelStageBytes = 4u * kDqSlots * kDqPanelFloats;
  static constexpr uint32_t kRowStatBytes = 4u * kBlockM;  // lse_log2 or delta of one q tile

  // Bytes of the plan with `stages` Q/dO ring stages and `dq_buffers` dQ staging buffers
  // (kv_full, then q_full, q_empty, do_full, do_empty per stage, then dq_full, dq_empty per
  // staging buffer at the end).
  static constexpr uint32_t smem_bytes(int stages, int dq_buffers) {
    return kKBytes + kVBytes + stages * (kQStageBytes + kDoStageBytes) + 2 * (kDsBytes + kPBytes) +
           dq_buffers * kDqPanelStageBytes + 2 * stages * kRowStatBytes +
           (1 + 4 * stages + 2 * dq_buffers) * 8;
  }
  // Dynamic shared memory is only 16-byte aligned: 1024 bytes of slack align the base.
  static constexpr uint32_t kSmemLimit = 227 * 1024 - 1024;

  // How dQ leaves the CTA. Normally each MMA warpgroup stages its fp32 dQ panels in shared
  // memory and the writer warp bulk-reduce-adds them (and, deterministic, waits for the tile's
  // turn), off the MMA warps' critical path. Where that staging buffer is what keeps the Q/dO
  // ring at one stage (256: Q/dO load latency exposed at every step), the MMA threads instead add
  // their dQ registers straight into dq_accum with v4 reductions, in the same fragment order, and
  // the 64 KB go to a second stage. (192, 128) has two stages either way and keeps the writer.
  static constexpr bool kDqFromRegisters = kSharedKeys &&
                                           smem_bytes(2, kMmaWarpgroups) >
                                               kSmemLimit&& smem_bytes(2, 0) <= kSmemLimit;
  static constexpr int kStages = smem_bytes(2, kDqFromRegisters ? 0 : kMmaWarpgroups) <= kSmemLimit
                                     ? 2
                                     : 1;  // Q/LSE and dO/delta rings

  // Staging buffers: kDqPerStep a step (the folded sum at Dqk 64, else one a warpgroup), in
  // kDqSets sets that successive steps use in turn where shared memory allows (Dqk 64 and 128),
  // so that in deterministic mode two writers run two tiles' chains at once (mainloop.cuh,
  // store_dq). Set 1 lies past everything else, so that a launch that does not use it (the
  // normal mode where dQ is not folded) asks for the shared memory of one set (smem_alloc).
  static constexpr int kDqPerStep = kDqFromRegisters ? 0 : (kDqByKeys ? 1 : kMmaWarpgroups);
  static constexpr uint32_t kDqSetBytes = kDqPerStep * kDqPanelStageBytes;
  static constexpr uint32_t kDqSetAlign = 128;  // bulk copies and 16-byte stores; bank-aligned
  static constexpr int kDqSets = kDqPerStep > 0 && smem_bytes(kStages, 2 * kDqPerStep) + kDqSetAlign
                                                       <= kSmemLimit
                                     ? 2
                                     : 1;
  static constexpr int kDqBuffers = kDqSets * kDqPerStep;

  static constexpr uint32_t kKOffset = 0;
  static constexpr uint32_t kVOffset = kKOffset + kKBytes;
  static constexpr uint32_t kQOffset = kVOffset + kVBytes;
  static constexpr uint32_t kDoOffset = kQOffset + kStages * kQStageBytes;
  static constexpr uint32_t kDsOffset = kDoOffset + kStages * kDoStageBytes;  // 2 buffers
  static constexpr uint32_t kPOffset = kDsOffset + 2 * kDsBytes;              // 2 buffers
  static constexpr uint32_t kDqOffset = kPOffset + 2 * kPBytes;               // set 0
  static constexpr uint32_t kLseOffset = kDqOffset + kDqSetBytes;
  static constexpr uint32_t kDeltaOffset = kLseOffset + kStages * kRowStatBytes;
  static constexpr uint32_t kBarrierOffset = kDeltaOffset + kStages * kRowStatBytes;
  static constexpr int kNumBarriers = 1 + 4 * kStages + 2 * kDqBuffers;
  static constexpr uint32_t kOneSetBytes = kBarrierOffset + kNumBarriers * 8;
  static constexpr uint32_t kDqSet1Offset =
      (kOneSetBytes + kDqSetAlign - 1) / kDqSetAlign * kDqSetAlign;
  static constexpr uint32_t kSmemBytes = kDqSets == 2 ? kDqSet1Offset + kDqSetBytes : kOneSetBytes;
  // Sets a launch uses: set 1 where folded (the fold takes two steps' buffers in turn) or
  // deterministic (a writer each); the normal mode unfolded keeps one.
  __host__ __device__ static constexpr int dq_sets(bool deterministic) {
    return kDqSets == 2 && (kDqByKeys || deterministic) ? 2 : 1;
  }
  // Dynamic shared memory of a launch.
  __host__ __device__ static constexpr uint32_t smem_alloc(bool deterministic) {
    return (dq_sets(deterministic) == 2 ? kSmemBytes : kOneSetBytes) + 1024;
  }
  static_assert(kSmemBytes <= smem_bytes(kStages, kDqBuffers) + kDqSetAlign,
                "shared-memory plan: offsets and size agree");
  static_assert(kSmemBytes <= kSmemLimit, "bwd: shared-memory plan exceeds 227 KB");
  static_assert(kDsOffset % 1024 == 0 && kPOffset % 1024 == 0 && kDqOffset % 1024 == 0,
                "panels 1024-B aligned");
};

// Views of the shared-memory plan (addresses from a 1024-aligned base).
template <class Traits>
struct SharedPlan {
  uint8_t* base;
  __device__ uint8_t* k() const { return base + Traits::kKOffset; }
  __device__ uint8_t* v() const { return base + Traits::kVOffset; }
  __device__ uint8_t* q(int stage) const {
    return base + Traits::kQOffset + stage * Traits::kQStageBytes;
  }
  __device__ uint8_t* dout(int stage) const {
    return base + Traits::kDoOffset + stage * Traits::kDoStageBytes;
  }
  __device__ uint8_t* ds(int buffer) const {
    return base + Traits::kDsOffset + buffer * Traits::kDsBytes;
  }
  __device__ uint8_t* p(int buffer) const {
    return base + Traits::kPOffset + buffer * Traits::kPBytes;
  }
  __device__ float* dq(int buffer) const {  // set buffer / kDqPerStep, warpgroup buffer % it
    const uint32_t set0 = buffer < Traits::kDqPerStep ? Traits::kDqOffset
                                                      : Traits::kDqSet1Offset - Traits::kDqSetBytes;
    return reinterpret_cast<float*>(base + set0 + buffer * Traits::kDqPanelStageBytes);
  }
  __device__ float* lse(int stage) const {
    return reinterpret_cast<float*>(base + Traits::kLseOffset + stage * Traits::kRowStatBytes);
  }
  __device__ float* delta(int stage) const {
    return reinterpret_cast<float*>(base + Traits::kDeltaOffset + stage * Traits::kRowStatBytes);
  }
  __device__ uint64_t* barriers() const {
    return reinterpret_cast<uint64_t*>(base + Traits::kBarrierOffset);
  }
  __device__ uint64_t* kv_full() const { return barriers(); }
  __device__ uint64_t* q_full(int s) const { return barriers() + 1 + s; }
  __device__ uint64_t* q_empty(int s) const { return barriers() + 1 + Traits::kStages + s; }
  __device__ uint64_t* do_full(int s) const { return barriers() + 1 + 2 * Traits::kStages + s; }
  __device__ uint64_t* do_empty(int s) const { return barriers() + 1 + 3 * Traits::kStages + s; }
  __device__ uint64_t* dq_full(int b) const { return barriers() + 1 + 4 * Traits::kStages + b; }
  __device__ uint64_t* dq_empty(int b) const {
    return barriers() + 1 + 4 * Traits::kStages + Traits::kDqBuffers + b;
  }
};

// ------------------------------------------------------------------------------ parameters
// Tensors are viewed as 4-D [B, S, H, D] by TMA (dims innermost first: D, H, S, B); varlen
// tensors are [1, total, H, D] and a sequence's rows start at cu_seqlens[b] along S.
struct SequenceParams {
  int batch = 0;
  int seqlen_q = 0, seqlen_k = 0;     // dense lengths
  const int* cu_seqlens_q = nullptr;  // device int32 [B + 1]; null for dense
  const int* cu_seqlens_k = nullptr;
  int total_q = 0, total_k = 0;    // varlen: the rows of q and of k, the bounds of cu_seqlens
  int max_seqlen_q = 0;            // grid bounds (dense: the lengths)
  DeviceStatus* status = nullptr;  // where a bad cu_seqlens entry is recorded
};

// Row layout of the workspace (workspace.hpp): sequence b's padded rows start at
// dense: b * dense_padded_len; varlen: floor((cu_q[b] + b M) / M) M.
struct WorkspaceParams {
  int64_t rows = 0;               // R, padded rows per head
  int64_t dense_padded_len = 0;   // ceil(Sq / M) M
  float* lse_log2 = nullptr;      // [Hq][R]
  float* delta = nullptr;         // [Hq][R]
  float* dsink = nullptr;         // [Hq][R / M]
  float* dq_accum = nullptr;      // [Hq][R][Dqk]
  uint32_t* semaphore = nullptr;  // [Hq][R / M]; null unless deterministic
};

// The main kernel's parameters.
struct BwdParams {
  CUtensorMap tm_q, tm_k, tm_v, tm_do;
  SequenceParams seq;
  WorkspaceParams ws;
  int heads_q = 0, heads_kv = 0, group = 1;  // group = Hq / Hkv
  CtaOrder order{};                          // blockIdx.x -> (KV block, KV head + Hkv request)
  int window_left = -1, window_right = -1;   // causal: right = 0
  float scale_log2 = 0.f;                    // log2(e) * scale, or log2(e) * softcap with a softcap
  float softcap_scale = 0.f;                 // != 0: logits are softcap * tanh(s * softcap_scale)
  float scale = 0.f;                         // dK and dQ are scaled by it at the end
  // dK / dV outputs (elements).
  void* dk = nullptr;
  void* dv = nullptr;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;
};

// Element strides of a query-side tensor (o, dout, dq: [B, S, H, D] or [total, H, D]) or of lse.
struct RowTensor {
  void* data = nullptr;
  int64_t batch_stride = 0, row_stride = 0, head_stride = 0;
};

// Preprocess and postprocess parameters (one block per (q tile, head, batch)).
struct RowKernelParams {
  SequenceParams seq;
  WorkspaceParams ws;
  int block_m = 64;
  int heads_q = 0, head_dim = 0, head_dim_v = 0;
  RowTensor out, dout, lse, dq;
  const float* sinks = nullptr;  // fp32 [Hq]; null: no sink gradient
  int64_t sinks_stride = 1;      // elements from one q head's sink to the next (any sign)
  float* dsinks = nullptr;       // output, element stride dsinks_stride
  int64_t dsinks_stride = 1;
  float scale = 0.f;  // dQ = scale * dq_accum
};

// ------------------------------------------------------------------------------ geometry
// Sequence b's lengths and offsets, computed the same way by every kernel of the family.
struct SeqInfo {
  int seqlen_q, seqlen_k;
  int row_q, row_k;  // first row of the sequence along S (varlen offset; dense 0)
  int batch_coord;   // TMA's B coordinate (dense: b; varlen: 0)
  int64_t ws_row0;   // first padded workspace row of the sequence
};

// Varlen offsets are clamped where they are read (offset_range), the same way by every kernel;
// kReport: thread 0 of the preprocess kernel's blocks records a bad pair.
template <bool kReport = false>
__device__ __forceinline__ SeqInfo seq_info(const SequenceParams& s, const WorkspaceParams& ws,
                                            int block_m, int b) {
  SeqInfo t;
  if (s.cu_seqlens_q != nullptr) {
    const OffsetRange q = offset_range(s.cu_seqlens_q, s.total_q, b);
    const OffsetRange k = offset_range(s.cu_seqlens_k, s.total_k, b);
    if (kReport && threadIdx.x == 0 && !(q.ok && k.ok)) {
      const OffsetRange& bad = q.ok ? k : q;
      record_violation(s.status,
                       status_tag(StatusFamily::kBwd,
                                  q.ok ? StatusIndex::kCuSeqlensK : StatusIndex::kCuSeqlensQ),
                       b, bad.position, bad.value, q.ok ? s.total_k : s.total_q);
    }
    t.row_q = q.row;
    t.seqlen_q = q.len;
    t.row_k = k.row;
    t.seqlen_k = k.len;
    t.batch_coord = 0;
    t.ws_row0 = ((int64_t{t.row_q} + int64_t{b} * block_m) / block_m) * block_m;
  } else {
    t.row_q = 0;
    t.row_k = 0;
    t.seqlen_q = s.seqlen_q;
    t.seqlen_k = s.seqlen_k;
    t.batch_coord = b;
    t.ws_row0 = int64_t{b} * ws.dense_padded_len;
  }
  return t;
}

}  // namespace hopattn::kernels::bwd
