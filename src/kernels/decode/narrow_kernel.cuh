// Decode kernel for requests of at most 8 rows (q_len * Hq / Hkv <= 8: a GQA group of up to 8 at
// one token, of 4 at two drafts) over a 16-bit cache whose pages hold whole 16-key blocks. The
// keys are the M of the MMAs and the rows their N:
//   S^T = K q^T   (m16n8k16: 16 keys x 8 rows, K by ldmatrix, q^T held in registers)
//   O^T += V^T P^T (16 features x 8 rows a tile, V^T by ldmatrix.trans, P^T's two 8x8 halves
//                  transposed into B fragments by movmatrix)
// where the small kernel (small_kernel.cuh) runs an m16 tile of rows, 4 of whose 16 rows are real
// at GQA 4: half the MMAs, half of O's registers and rescales, half the softmax values a lane.
//
// Why: the batch family's concurrent form streams a mixed step's decodes from the few SMs its
// prefill leaves them (issue 11's (a): 2.08 GB from ~28 of 132 SMs), where the small kernel is
// bound by its instructions a block (~550 an 8 KB block a warp at ~78% of the SM's issue rate at
// ~86 GB/s an SM, docs/perf/NOTES.md), not by bytes in flight. Here a block also loads with
// fewer instructions: a block lies in one page (page_size % 16 == 0), so its page id is one
// warp-uniform lookup, and each copy of the warp reads whole 128-byte lines of rows that are
// slots of that page (a lane's source steps by a fixed stride), into rows padded by 16 bytes
// (ldmatrix conflict free with one address register a lane, no swizzle).
//
// Schedule (the small kernel's): grid (1, Hkv, requests), four warps, each streaming its own
// 16-key blocks (w, w + 4, ..) through its own cp.async ring (__syncwarp, no CTA barrier in the
// loop), the four states merged once at the end, one split (the planner forces it). Blocks are
// aligned to 16 keys; keys of a block outside [window start, kv_len) are zero-filled, never
// loaded (evicted pages are never read). Semantics as kernel.cuh: masks (bottom-right causal,
// window), softcap, sinks, per-tensor or per-head k / v scales, NaN propagation, lse.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/keys_as_m.cuh"
#include "kernels/decode/epilogue.cuh"
#include "kernels/decode/mainloop.cuh"
#include "ptx/grid_dependency.cuh"
#include "ptx/shared_memory.cuh"

namespace hopattn::kernels::decode {

// Geometry of the narrow kernel at head dim kHeadDim (16-bit K and V).
template <int kHeadDim>
struct NarrowTraits {
  static_assert(narrow_kernel_head_dim(kHeadDim), "a head dim of the narrow kernel");
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kRowStride = kRowBytes + 16;  // padded: 8 rows of a matrix, 8 bank groups
  static constexpr int kBlockBytes = kBlockTokens * kRowStride;  // K (or V) rows of a block
  static constexpr int kStageBytes = 2 * kBlockBytes;            // K rows, then V rows
  // ~26 KB of ring a warp, two CTAs an SM: D = 128 three stages (two blocks in flight while one
  // is read), D = 64 five.
  static constexpr int kStagesFit = 26 * 1024 / kStageBytes;
  static constexpr int kStages = kStagesFit > 8 ? 8 : kStagesFit;
  static constexpr int kWarpRingBytes = kStages * kStageBytes;
  static constexpr int kRingBytes = kWarps * kWarpRingBytes;
  static constexpr int kLanesPerRow = kRowBytes / 16;          // 16-byte pieces a row
  static constexpr int kRowsPerCopy = 32 / kLanesPerRow;       // rows a copy of the warp
  static constexpr int kCopies = kBlockTokens / kRowsPerCopy;  // copies a block (K, and V)
  static constexpr int kKSteps = kHeadDim / 16;                // k16 steps of S^T
  static constexpr int kFeatureTiles = kHeadDim / 16;          // m16 tiles of O^T
  // The warps' states for the merge, in the ring once it is drained.
  static constexpr int kMergeStride = kHeadDim + 4;
  static_assert(WarpStates::bytes(kNarrowRows, kMergeStride) <= kRingBytes, "merge in the ring");
  static constexpr int smem_bytes() { return kRingBytes; }
  static_assert(kStages >= 3, "two blocks in flight a warp");
  static_assert(smem_fits(smem_bytes(), 2), "two CTAs an SM");
};

// The keys of a narrow CTA: [lo, hi) = [window start, kv_len) in blocks aligned to 16 keys, warp
// `warp`'s blocks warp, warp + kWarps, .. of them, and the keys every row sees (small_range's).
struct NarrowRange {
  int kv_len;
  int lo, hi;
  int warp_first;  // first key of the warp's first block (a multiple of 16)
  int blocks;      // the warp's blocks
  int64_t pages;   // element offset of the request's page list
  int full_lo, full_hi;
};

__device__ __forceinline__ NarrowRange narrow_range(const Params& p, int request, int warp,
                                                    int kv_len_loaded) {
  NarrowRange r;
  r.kv_len = kv_len_checked(p, request, kv_len_loaded);
  r.lo = window_first_key(p, r.kv_len);
  r.hi = r.kv_len;
  const int first = r.lo & ~(kBlockTokens - 1);
  const int total = r.hi > r.lo ? (r.hi - first + kBlockTokens - 1) / kBlockTokens : 0;
  r.warp_first = first + warp * kBlockTokens;
  r.blocks = total > warp ? (total - warp + kWarps - 1) / kWarps : 0;
  r.pages = page_list_at(p, request);
  unmasked_keys(p, r.kv_len, r.full_lo, r.full_hi);
  return r;
}

// The page-table entry of the warp's block i (the same for every lane: a block lies in one page),
// or kNoKey past the warp's blocks.
__device__ __forceinline__ int narrow_page(const Params& p, const NarrowRange& r, int i) {
  if (i >= r.blocks) return kNoKey;
  const int key0 = r.warp_first + i * (kWarps * kBlockTokens);
  return page_entry(p, r.pages, static_cast<int>(p.page_div.divide(static_cast<uint32_t>(key0))));
}

// Blocks whose page-table entry a warp has in flight beyond the copies issued (PageWindow).
constexpr int kNarrowPagesAhead = 4;

// Block i's K and V rows into `stage` by 16-byte cp.async pieces, each copy of the warp whole
// 128-byte lines: lane l copies piece l % kLanesPerRow of row kRowsPerCopy * j + l /
// kLanesPerRow in copy j, so that the L2 sees every sector of a line in one request (a copy of
// 16 rows' 32-byte sectors, one line a lane pair, streamed the HBM at 0.7x: run set as). The
// rows of a block are slots of one page, so a lane's source moves by a fixed step a copy and its
// destination by a constant. A key outside [lo, hi) and a page id outside the pool are
// zero-filled (the source then the cache base); the id goes to `bad`.
template <class T>
__device__ __forceinline__ void narrow_issue(const Params& p, const NarrowRange& r, int i, int page,
                                             uint32_t stage, const char* k_head, const char* v_head,
                                             int lane, BadPageInRegister& bad) {
  const int key0 = r.warp_first + i * (kWarps * kBlockTokens);
  const bool own = static_cast<uint32_t>(page) < static_cast<uint32_t>(p.num_pages);
  if (!own) bad.note(page);
  const int row = lane / T::kLanesPerRow, piece = lane % T::kLanesPerRow;
  const int index = static_cast<int>(p.page_div.divide(static_cast<uint32_t>(key0)));
  const int64_t slot = key0 - index * p.page_size + row;
  const int64_t pg = own ? page : 0;
  const char* k_src = k_head + pg * p.k_page_stride + slot * p.k_slot_stride + 16 * piece;
  const char* v_src = v_head + pg * p.v_page_stride + slot * p.v_slot_stride + 16 * piece;
  const int64_t k_step = T::kRowsPerCopy * p.k_slot_stride;
  const int64_t v_step = T::kRowsPerCopy * p.v_slot_stride;
  const uint32_t k_dst = stage + row * T::kRowStride + 16 * piece;
  const uint32_t v_dst = k_dst + T::kBlockBytes;
  if (own && key0 >= r.lo && key0 + kBlockTokens <= r.hi) {  // nearly every block
#pragma unroll
    for (int j = 0; j < T::kCopies; ++j) {
      ptx::cp_async_16_l2_256(k_dst + j * T::kRowsPerCopy * T::kRowStride, k_src + j * k_step, 16);
      ptx::cp_async_16_l2_256(v_dst + j * T::kRowsPerCopy * T::kRowStride, v_src + j * v_step, 16);
    }
  } else {
#pragma unroll
    for (int j = 0; j < T::kCopies; ++j) {
      const int key = key0 + j * T::kRowsPerCopy + row;
      const bool ok = own && key >= r.lo && key < r.hi;
      ptx::cp_async_16_l2_256(k_dst + j * T::kRowsPerCopy * T::kRowStride,
                              ok ? k_src + j * k_step : p.k_cache, ok ? 16 : 0);
      ptx::cp_async_16_l2_256(v_dst + j * T::kRowsPerCopy * T::kRowStride,
                              ok ? v_src + j * v_step : p.v_cache, ok ? 16 : 0);
    }
  }
}

// One warp's running state: the max (log2 domain, lazy) and this lane's part of the sums of rows
// 2qd and 2qd + 1, and O^T: element (t, e) is feature 16t + g + 8(e >> 1) of row 2qd + (e & 1).
template <int kFeatureTiles>
struct NarrowState {
  float m[2], l[2];
  float o[kFeatureTiles][4];
};

// One block: S^T = K q^T, the logit transform, the mask (boundary blocks), the online softmax,
// O^T += V^T P^T. s[e]: key g + 8 (e >> 1) of the block, row 2qd + (e & 1).
template <class T, class Elt>
__device__ __forceinline__ void narrow_attend(NarrowState<T::kFeatureTiles>& st, uint32_t stage,
                                              const uint32_t (&qb)[T::kKSteps][2], int lane,
                                              int key0, bool masked, const RowMask* rows,
                                              const LogitTransform& logit) {
  const int g = lane / 4, qd = lane % 4;
  float s[4] = {0.f, 0.f, 0.f, 0.f};
  {
    // ldmatrix matrix j = lane / 8: keys 8 (j & 1) .., features 8 (j >> 1) .. of a k16 step.
    const uint32_t k_at =
        stage + (((lane >> 3) & 1) * 8 + (lane & 7)) * T::kRowStride + (lane >> 4) * 16;
    float s1[4] = {0.f, 0.f, 0.f, 0.f};  // odd k-steps: two chains of half the length
#pragma unroll
    for (int k = 0; k < T::kKSteps; k += 2) {
      uint32_t a[4], a1[4];
      ptx::ldmatrix_x4(a, k_at + 32 * k);
      ptx::ldmatrix_x4(a1, k_at + 32 * (k + 1));
      ptx::mma_m16n8k16<Elt>(s, a, qb[k][0], qb[k][1]);
      ptx::mma_m16n8k16<Elt>(s1, a1, qb[k + 1][0], qb[k + 1][1]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] += s1[e];
  }
  logit.apply(s);
  if (masked) {
    const RowMask r[2] = {rows[2 * qd], rows[2 * qd + 1]};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (!key_visible(r[e & 1], key0 + g + 8 * (e >> 1), -1)) s[e] = -INFINITY;
    }
  }
  float correction[2];
  if (keys_softmax_lazy(s, st.m, st.l, correction, 1.f)) {  // the logits are log2 units already
#pragma unroll
    for (int t = 0; t < T::kFeatureTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) st.o[t][e] *= correction[e & 1];
    }
  }
  uint32_t b0, b1;
  keys_p_fragments<Elt>(s, b0, b1);
  // V^T's A fragments: matrices (keys 0-7 | 8-15) x (features +0 | +8), transposed.
  const uint32_t v_at = stage + T::kBlockBytes + ((lane >> 4) * 8 + (lane & 7)) * T::kRowStride +
                        ((lane >> 3) & 1) * 16;
#pragma unroll
  for (int t = 0; t < T::kFeatureTiles; ++t) {
    uint32_t a[4];
    ptx::ldmatrix_x4_trans(a, v_at + 32 * t);
    ptx::mma_m16n8k16<Elt>(st.o[t], a, b0, b1);
  }
}

// Grid (1, Hkv, requests), 128 threads, two CTAs an SM; rows_per_request <= 8; one split.
template <int kHeadDim, class Elt>
__global__ void __launch_bounds__(kThreads, 2)
    decode_narrow_kernel(const __grid_constant__ Params p) {
  using T = NarrowTraits<kHeadDim>;
  extern __shared__ __align__(128) char smem[];
  __shared__ CtaShared cs;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
  const int kv_head = blockIdx.y, request = blockIdx.z;
  const int rows_valid = p.rows_per_request;  // <= kNarrowRows
  const uint32_t ring = ptx::smem_address(smem);

  // Launched as a programmatic dependent (programmatic_launch.cuh): everything below may read
  // what the kernel before wrote (q, the cache's new tokens, lengths, page table).
  ptx::begin_dependent_grid();
  const int kv_len_loaded = p.kv_lens[request * p.kv_lens_stride];
  // q^T's B fragments, straight from global memory: lane (g, qd) holds row g's features
  // 16k + 2qd, +1 and 16k + 8 + 2qd, +1 of each k16 step (zeros past the request's rows).
  uint32_t qb[T::kKSteps][2];
  {
    const uint32_t* q_row = nullptr;
    if (g < rows_valid) {
      const RowCoord c = row_coord(p, g);
      const int h = kv_head * p.group + c.head;
      q_row = reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(p.q) +
                                                request * p.q_stride[0] + c.token * p.q_stride[1] +
                                                h * p.q_stride[2]);
    }
#pragma unroll
    for (int k = 0; k < T::kKSteps; ++k) {
      qb[k][0] = q_row != nullptr ? __ldg(q_row + 8 * k + qd) : 0u;
      qb[k][1] = q_row != nullptr ? __ldg(q_row + 8 * k + 4 + qd) : 0u;
    }
  }
  const NarrowRange range = narrow_range(p, request, warp, kv_len_loaded);

  // The warp's first blocks, each page id looked up kNarrowPagesAhead blocks before its copies.
  PageWindow<kNarrowPagesAhead, int> pages;
  const auto fetch = [&](int i) { return narrow_page(p, range, i); };
  pages.start(fetch);
  const char* k_head = p.k_cache + kv_head * p.k_head_stride;
  const char* v_head = p.v_cache + kv_head * p.v_head_stride;
  BadPageInRegister bad;
  const WarpRing<T::kStages, T::kStageBytes, uint32_t> warp_ring{ring + warp * T::kWarpRingBytes};
  const auto load = [&](int j, uint32_t stage) {
    const int page = pages.pop(fetch, j + kNarrowPagesAhead);
    if (j < range.blocks) narrow_issue<T>(p, range, j, page, stage, k_head, v_head, lane, bad);
  };
  warp_ring.start(load);

  if (tid == 0) {
    cs.kv_len[0] = range.kv_len;
    cs.bad_claimed = 0u;
  }
  __syncwarp();
  if (tid < kNarrowRows) cs.rows[tid] = row_mask(p, cs, request, tid);
  __syncthreads();  // row masks, bad_claimed

  const HeadScales scales = head_scales(p, kv_head);
  const LogitTransform logit = make_logit(p, scales.k, 1.f);
  NarrowState<T::kFeatureTiles> st;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.f;
#pragma unroll
  for (int t = 0; t < T::kFeatureTiles; ++t)
    st.o[t][0] = st.o[t][1] = st.o[t][2] = st.o[t][3] = 0.f;

  // ---- main loop.
  warp_ring.run(range, load, [&](uint32_t stage, int key0, bool masked) {
    narrow_attend<T, Elt>(st, stage, qb, lane, key0, masked, cs.rows, logit);
  });
  drain_and_report(p, cs, bad);  // every warp's ring is drained: the merge buffers reuse it

  // ---- the four warps' states (disjoint keys) into one, a thread per (row, 4 features).
  const WarpStates states(smem, kNarrowRows, T::kMergeStride);
  {
    const float sum[2] = {keys_sum(st.l[0]), keys_sum(st.l[1])};
    if (g == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        states.m[warp * kNarrowRows + 2 * qd + h] = st.m[h];
        states.l[warp * kNarrowRows + 2 * qd + h] = sum[h];
      }
    }
    float* wo = states.o_of(warp);
#pragma unroll
    for (int t = 0; t < T::kFeatureTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = 2 * qd + (e & 1);
        if (n < rows_valid) wo[n * T::kMergeStride + 16 * t + g + 8 * (e >> 1)] = st.o[t][e];
      }
    }
  }
  __syncthreads();

  constexpr int kQuads = kHeadDim / 4;
  for (int idx = tid; idx < rows_valid * kQuads; idx += kThreads) {
    const int rr = idx / kQuads, d = 4 * (idx % kQuads);
    float lse2;
    const float4 o = states.merge(rr, d, lse2);
    const float f = finish_row(p, request, kv_head, rr, lse2, scales.v, /*store_lse=*/d == 0);
    store_out4<Elt>(p, request, kv_head, rr, d, make_float4(o.x * f, o.y * f, o.z * f, o.w * f));
  }
}

}  // namespace hopattn::kernels::decode
