// Decode kernel for requests of one m16 row tile (<= 16 rows: the GQA group times the draft
// tokens), first built for small grids (batch 1 to a few requests): the same block math and
// gather as kernel.cuh, on a schedule without a fixed chain in series. kernel.cuh's CTA waits for
// thread 0's setup, gathers 64-key tiles with all four warps behind a CTA barrier a tile, and
// merges the splits through a weight pass, a barrier and a sum pass; at batch 1 these fixed steps
// took more than half of a launch (docs/perf/NOTES.md, run set q's per-CTA timeline: ~23K of ~43K
// cycles). Here:
//   - every thread computes the CTA's key range itself (one kv_len load, a few integer ops), so
//     q, the row masks and the first page ids are loaded together, without waiting for a thread;
//   - each warp streams its own 16-key blocks (blocks w, w + 4, .. of the split) through its own
//     cp.async ring, ordered by __syncwarp: no CTA barrier inside the main loop;
//   - the four warps' states merge in one pass (each thread weighs the four states of its row);
//   - the last CTA of a problem merges the splits in one pass as well: each thread loads the lse
//     and o of its (row, 4 features) for up to 16 splits at once, one L2 round trip per 16 splits.
// Without the tile barrier each warp runs ahead on its own ring, which also made it the faster
// kernel at large batch (0.98x the tile kernel's time over bf16, 0.88-0.90x over fp8 caches at
// B = 32..128; docs/perf/decode.md), so the planner (src/plan/decode_plan.cpp,
// small_kernel_takes) takes it for every call of beam width 1, no tree mask, at most 16 rows a
// request and D = 64 or 128, over every KV format. The workspace (partials, semaphores) is
// kernel.cuh's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/decode/epilogue.cuh"
#include "kernels/decode/mainloop.cuh"
#include "ptx/grid_dependency.cuh"

namespace hopattn::kernels::decode {

// Geometry: the gather and block math of Traits (same swizzles and row bytes), with a stage of
// one 16-key block (K rows, then V rows) and a ring of kStages stages a warp.
template <int kHeadDim, int kKvBytes, int kCtas = 2>
struct SmallTraits : Traits<kHeadDim, kKvBytes, 2> {
  using Base = Traits<kHeadDim, kKvBytes, 2>;
  static_assert(kHeadDim <= 128, "q fragments and o of one warp in registers");
  static_assert(kCtas == 2 || (kCtas == 3 && kKvBytes == 1),
                "two CTAs an SM, or three over 8 bits");
  static constexpr int kTileBytes = kBlockTokens * Base::kRowBytes;  // K (or V) of one block
  static constexpr int kStageBytes = 2 * kTileBytes;
  // ~96 KB of ring a CTA at two CTAs an SM: D = 128 16-bit three 8 KB stages a warp (two blocks
  // in flight while one is consumed: 128 KB an SM), 8-bit six 4 KB stages; D = 64 six / eight.
  // At three CTAs an SM (e4m3 and int8 caches) 64 KB: D = 128 four 4 KB stages a warp, D = 64
  // eight.
  static constexpr int kStagesFit = (kCtas == 3 ? 16 : 24) * 1024 / kStageBytes;
  static constexpr int kStages = kStagesFit > 8 ? 8 : kStagesFit;
  static constexpr int kWarpRingBytes = kStages * kStageBytes;
  static constexpr int kRingBytes = kWarps * kWarpRingBytes;
  // One row tile: load_q issues every piece of a thread (2 at D = 128) before storing any.
  static constexpr int kQLoadBatch = kMmaRows * (Base::kQRowBytes / 16) / kThreads;
  static constexpr int kIssueIters = Base::kChunksPerRow * kBlockTokens / 32;
  static constexpr int kIssueUnroll = kIssueIters;
  // The warps' states for the cross-warp merge, in the ring once it is drained.
  static constexpr int kMergeStride = kHeadDim + 8;
  static_assert(WarpStates::bytes(kMmaRows, kMergeStride) <= kRingBytes, "merge in the ring");
  static constexpr int smem_bytes() { return kRingBytes + kMmaRows * Base::kQRowBytes; }
  static_assert(kStages >= 3, "two blocks in flight a warp");
  static_assert(smem_fits(smem_bytes(), kCtas), "kCtas CTAs an SM");
};

// Page of key `lane` (< 16) of the warp's block i, or kNoKey: looked up kPagesAhead blocks before
// its copies are issued (PageWindow).
__device__ __forceinline__ PageRef small_fetch(const Params& p, const SmallRange& r, int i,
                                               int lane) {
  PageRef ref{kNoKey, 0};
  const int key = r.warp_first + i * (kWarps * kBlockTokens) + lane;
  if (i < r.blocks && lane < kBlockTokens && key < r.hi) {
    const int index = static_cast<int>(p.page_div.divide(static_cast<uint32_t>(key)));
    ref.slot = key - index * p.page_size;
    ref.page = page_entry(p, r.pages, index);
  }
  return ref;
}

// The merge of a problem's split partials for (row rr, features d .. d + 3), by one thread: the
// lse and o of 16 splits at a time, folded into a running (top, total, acc) with their weights
// 2^(lse - top). kOverlap (two CTAs an SM, registers to spare): the next 16 splits' loads in
// flight while a batch is folded (32 splits, batch 1 kv 8k's plan: one L2 round trip instead of
// two); the three-CTA instances (168 registers) spill with it and load a batch after the last is
// folded. An empty split (lse = -inf) weighs 0 and its o is not added; a NaN lse makes the row
// NaN.
struct SplitBatch {
  static constexpr int kSplits = 16;
  float l[kSplits];
  float4 x[kSplits];

  template <int kHeadDim>
  __device__ __forceinline__ void load(const Params& p, const float* lse_all, const float* o_all,
                                       int s0) {
#pragma unroll
    for (int u = 0; u < kSplits; ++u) {
      const int s = s0 + u;  // past the last split: no load
      l[u] = s < p.num_splits ? __ldcg(lse_all + s * kMmaRows) : -INFINITY;
      x[u] = s < p.num_splits
                 ? __ldcg(reinterpret_cast<const float4*>(o_all + int64_t(s) * kMmaRows * kHeadDim))
                 : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
};

template <int kHeadDim, bool kOverlap>
__device__ __forceinline__ float4 merge_small_splits(const Params& p, int64_t problem, int rr,
                                                     int d, float& lse2) {
  constexpr int kBatch = SplitBatch::kSplits;
  const int splits = p.num_splits;
  const float* lse_all = p.partial_lse + problem * splits * kMmaRows + rr;
  const float* o_all = p.partial_o + (problem * splits * kMmaRows + rr) * kHeadDim + d;
  float top = -INFINITY, total = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  SplitBatch cur;
  cur.load<kHeadDim>(p, lse_all, o_all, 0);
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    SplitBatch next{};  // every field is written by load (kOverlap) or unused
    if constexpr (kOverlap) next.load<kHeadDim>(p, lse_all, o_all, s0 + kBatch);
    float peak = top;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) peak = fmaxf(peak, cur.l[u]);
    const float alpha = peak == top ? 1.f : exp2f(top - peak);  // top = -inf: 0
    total *= alpha;
    acc.x *= alpha, acc.y *= alpha, acc.z *= alpha, acc.w *= alpha;
    top = peak;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float w = cur.l[u] == -INFINITY ? 0.f : exp2f(cur.l[u] - top);
      total += w;
      if (w != 0.f) {
        const float4 v = cur.x[u];
        acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
      }
    }
    if constexpr (kOverlap) {
      cur = next;
    } else {
      cur.load<kHeadDim>(p, lse_all, o_all, s0 + kBatch);
    }
  }
  lse2 = total == 0.f ? -INFINITY : top + log2f(total);
  const float inv = total == 0.f ? 0.f : 1.f / total;
  return make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
}

// Grid (num_splits, Hkv, requests), 128 threads; rows_per_cta = 16 = one row tile a request;
// kCtas CTAs an SM (registers and shared memory).
template <int kHeadDim, class Elt, KvFormat kFormat, int kCtas>
__global__ void __launch_bounds__(kThreads, kCtas)
    decode_small_kernel(const __grid_constant__ Params p) {
  static_assert(kCtas <= small_kernel_max_ctas(kFormat), "an instance the launch builds");
  using T = SmallTraits<kHeadDim, kv_format_bytes(kFormat), kCtas>;
  // bf16 q over an 8-bit cache runs its MMAs in fp16 (to_half_q in mainloop.cuh says why).
  constexpr bool kHalfMma = kFormat != KvFormat::kNative16 && std::is_same_v<Elt, __nv_bfloat16>;
  using MmaElt = std::conditional_t<kHalfMma, __half, Elt>;
  // Blocks whose page-table entries a lane has in flight beyond the copies issued (PageWindow):
  // four over a 16-bit cache (pages of 1, batch 1: 1.04x faster, others equal to 1.008x), one
  // over 8-bit caches, where four measured 1.009x slower at B = 64 (run set ah, H100).
  constexpr int kPagesAhead = kFormat == KvFormat::kNative16 ? 4 : 1;
  extern __shared__ __align__(128) char smem[];
  __shared__ CtaShared cs;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
  const int split = blockIdx.x, kv_head = blockIdx.y, request = blockIdx.z;
  const int rows_valid = p.rows_per_request;  // <= 16
  char* ring = smem;
  char* q_smem = smem + T::kRingBytes;

  // Launched as a programmatic dependent (programmatic_launch.cuh): everything below may read
  // what the kernel before wrote (q, the cache's new tokens, lengths, page table, workspace).
  ptx::begin_dependent_grid();
  // Every thread: kv_len's load and q's together, then the key range (no thread-0 setup to wait
  // for), the first page ids one round trip later, and the first blocks' copies as soon as those
  // land. q's stores, the row masks and the CTA barrier come after the copies are in flight: the
  // chain to the first block is kv_len, page ids, KV, with the rest of the setup under it.
  const int kv_len_loaded = p.kv_lens[request * p.kv_lens_stride];
  static_assert(T::kQLoadBatch * kThreads == kMmaRows * QPieces<T>::kChunks, "one batch of q");
  QPieces<T> q_pieces;
  q_pieces.load(p, tid, request, kv_head, 0, rows_valid);
  const SmallRange range = small_range(p, request, split, warp, kv_len_loaded);
  PageWindow<kPagesAhead, PageRef> pages;
  const auto fetch = [&](int i) { return small_fetch(p, range, i, lane); };
  pages.start(fetch);

  // ---- the warp's first blocks: its own ring; __syncwarp orders the lanes' copies and reads.
  // A page id outside the pool waits in a register until the loop is done (BadPageInRegister).
  const char* k_head = p.k_cache + kv_head * p.k_head_stride;
  const char* v_head = p.v_cache + kv_head * p.v_head_stride;
  BadPageInRegister bad;
  const WarpRing<T::kStages, T::kStageBytes, char*> warp_ring{ring + warp * T::kWarpRingBytes};
  const auto load = [&](int j, char* stage) {
    const PageRef cur = pages.pop(fetch, j + kPagesAhead);
    if (j < range.blocks) issue_tile<T>(p, bad, stage, cur, k_head, v_head, 0, lane);
  };
  warp_ring.start(load);

  if (tid == 0) {
    cs.kv_len[0] = range.kv_len;
    cs.bad_claimed = 0u;
  }
  uint32_t q_absmax = 0;
  q_pieces.template store<kHalfMma>(p, tid, q_smem, q_absmax);
  publish_q_absmax<kHalfMma>(cs, q_absmax);
  __syncwarp();
  if (tid < kMmaRows) cs.rows[tid] = row_mask(p, cs, request, tid);
  __syncthreads();  // q, row masks, bad_claimed
  float q_unscale = 1.f;
  if constexpr (kHalfMma) {
    q_unscale = to_half_q<T>(p, cs, q_smem);
    __syncthreads();
  }

  uint32_t q_regs[kHeadDim / 16][4];
  load_q_regs<T>(q_smem, 0, lane, q_regs);
  const HeadScales scales = head_scales(p, kv_head);
  const LogitTransform logit = make_logit(p, scales.k, q_unscale);
  WarpState<kHeadDim> st;
  st.reset();

  // ---- main loop.
  warp_ring.run(range, load, [&](char* k_tile, int key0, bool masked) {
    attend_block<T, MmaElt, kFormat>(st, k_tile, k_tile + T::kTileBytes, q_smem, q_regs, 0, 0, 0,
                                     lane, key0, masked, range.hi, -1, cs.rows, logit);
  });
  drain_and_report(p, cs, bad);  // every warp's ring is drained: the merge buffers reuse it

  // ---- the four warps' states (disjoint keys) into one, a thread per (row, 4 features).
  const WarpStates states(ring, kMmaRows, T::kMergeStride);
  {
    st.store_rows(states.m + warp * kMmaRows, states.l + warp * kMmaRows, g, qd == 0);
    float* wo = states.o_of(warp);
#pragma unroll
    for (int n = 0; n < kHeadDim / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        // 8-bit V permutes the features of o and leaves 2^8 out of e4m3's odd n-tiles.
        const int d = out_feature<kFormat>(0, n, qd, e);
        const float f = o_unscale<kFormat>(n);
        if (g < rows_valid) wo[g * T::kMergeStride + d] = st.o[n][e] * f;
        if (g + 8 < rows_valid) wo[(g + 8) * T::kMergeStride + d] = st.o[n][2 + e] * f;
      }
    }
  }
  __syncthreads();

  constexpr int kQuads = kHeadDim / 4;
  const bool split_mode = p.num_splits > 1;
  const int64_t problem = int64_t(request) * p.num_kv_heads + kv_head;
  const int64_t slot = problem * p.num_splits + split;
  for (int idx = tid; idx < rows_valid * kQuads; idx += kThreads) {
    const int rr = idx / kQuads, d = 4 * (idx % kQuads);
    float lse2;
    const float4 o = states.merge(rr, d, lse2);
    if (!split_mode) {
      const float f = finish_row(p, request, kv_head, rr, lse2, scales.v, /*store_lse=*/d == 0);
      store_out4<Elt>(p, request, kv_head, rr, d, make_float4(o.x * f, o.y * f, o.z * f, o.w * f));
    } else {
      // Every valid row is written, empty ones too (o = 0, lse = -inf): the last CTA reads every
      // split's partials unconditionally.
      float* po = p.partial_o + (slot * kMmaRows + rr) * kHeadDim + d;
      *reinterpret_cast<float4*>(po) = o;
      if (d == 0) p.partial_lse[slot * kMmaRows + rr] = lse2;
    }
  }
  if (!split_mode) return;

  // ---- the last CTA of the problem merges the splits.
  if (!last_split_to_finish(p, cs, problem)) return;
  for (int idx = tid; idx < rows_valid * kQuads; idx += kThreads) {
    const int rr = idx / kQuads, d = 4 * (idx % kQuads);
    float lse2;
    const float4 o = merge_small_splits<kHeadDim, kCtas == 2>(p, problem, rr, d, lse2);
    const float f = finish_row(p, request, kv_head, rr, lse2, scales.v, /*store_lse=*/d == 0);
    store_out4<Elt>(p, request, kv_head, rr, d, make_float4(o.x * f, o.y * f, o.z * f, o.w * f));
  }
}

}  // namespace hopattn::kernels::decode
