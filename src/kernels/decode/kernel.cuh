// Decode kernel, part 3 of 3: the kernel (one CTA = one request x one KV head x one row tile x
// one split of the keys): CTA setup and q, the main loop over the split's key tiles, the
// cross-group merge, then the output or, with several splits, the partial state and the last
// CTA's merge. Row finishing and output stores: epilogue.cuh; the merge of the splits:
// split_merge.cuh; the host launch of one instantiation: launch_kernel.cuh. The kernel's own
// epilogue steps stay in its body: moved into functions they cost ptxas a register at D = 64
// (129 -> 130; 135 -> 146 for the 8-bit caches). Schedule and rationale: README.md beside this
// file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/decode/epilogue.cuh"
#include "kernels/decode/mainloop.cuh"
#include "kernels/decode/split_merge.cuh"
#include "ptx/atomic.cuh"
#include "ptx/grid_dependency.cuh"

namespace hopattn::kernels::decode {

// ------------------------------------------------------------------------------ the kernel

// Grid (num_splits, Hkv * row_tiles, requests), 128 threads. Warp group G (one warp, or a warp
// pair at D = 256 splitting the output features) computes row tile G % row_tiles_cta of the CTA
// against key slice G / row_tiles_cta of each 64-key tile; all four warps gather every tile
// together (16 rows each).
template <int kHeadDim, class Elt, KvFormat kFormat, int kCtasPerSm>
__global__ void __launch_bounds__(kThreads, kCtasPerSm >= 3 ? 3 : 1)
    decode_kernel(const __grid_constant__ Params p) {
  using T = Traits<kHeadDim, kv_format_bytes(kFormat), kCtasPerSm>;
  extern __shared__ __align__(128) char smem[];
  __shared__ CtaShared cs;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y / p.row_tiles;
  const int row_tile = blockIdx.y % p.row_tiles;
  const int request = blockIdx.z;
  const int row_begin = row_tile * p.rows_per_cta;
  const int rows_valid = min(p.rows_per_cta, p.rows_per_request - row_begin);
  char* ring = smem;
  char* q_smem = smem + T::kRingBytes;

  // bf16 q over an 8-bit cache runs its MMAs in fp16 (to_half_q in mainloop.cuh says why).
  constexpr bool kHalfMma = kFormat != KvFormat::kNative16 && std::is_same_v<Elt, __nv_bfloat16>;
  using MmaElt = std::conditional_t<kHalfMma, __half, Elt>;

  // Launched as a programmatic dependent (programmatic_launch.cuh): everything below may read
  // what the kernel before wrote (q, the cache's new tokens, lengths, page table, workspace).
  ptx::begin_dependent_grid();
  if (tid == 0) setup_cta(p, cs, request, row_begin, rows_valid, split);
  load_q<T, kHalfMma>(p, cs, q_smem, request, kv_head, row_begin, rows_valid);
  __syncthreads();
  float q_unscale = 1.f;
  if constexpr (kHalfMma) {
    q_unscale = to_half_q<T>(p, cs, q_smem);
    __syncthreads();
  }

  const int row_tiles_cta = p.rows_per_cta / kMmaRows;  // 1, 2 or 4 (<= kGroups)
  const int group = warp / T::kFeatureSplit, half = warp % T::kFeatureSplit;
  const int m_tile = group % row_tiles_cta;
  const int slices = T::kGroups / row_tiles_cta;
  const int slice_keys = kTileTokens / slices;  // keys per group per tile
  const int slice_first = (group / row_tiles_cta) * slice_keys;
  // Row masks: ordered before their first use by the main loop's first barrier.
  if (tid < p.rows_per_cta) cs.rows[tid] = row_mask(p, cs, request, row_begin + tid);

  uint32_t q_regs[T::kQInRegisters ? kHeadDim / 16 : 1][4];
  if constexpr (T::kQInRegisters) load_q_regs<T>(q_smem, m_tile, lane, q_regs);

  const HeadScales scales = head_scales(p, kv_head);
  const LogitTransform logit = make_logit(p, scales.k, q_unscale);

  WarpState<T::kWarpFeatures> st;
#pragma unroll
  for (int n = 0; n < T::kWarpFeatures / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[n][e] = 0.f;
  }
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.f;

  // ---- main loop: kStages-deep cp.async ring, one barrier per tile.
  const char* k_head = p.k_cache + kv_head * p.k_head_stride;
  const char* v_head = p.v_cache + kv_head * p.v_head_stride;
  const int num_tiles = cs.tile_count;
  const bool several_beams = cs.beam_lo != cs.beam_hi;
  BadPageInShared bad{cs};
  // Prologue: tiles 0 .. kStages-2 in flight, each page lookup one tile ahead of its copies.
  PageRef next = fetch_page(p, cs, 0, warp, lane);
#pragma unroll 1
  for (int s = 0; s < T::kStages - 1; ++s) {
    const PageRef cur = next;
    next = fetch_page(p, cs, s + 1, warp, lane);
    if (s < num_tiles) {
      issue_tile<T>(p, bad, ring + s * T::kStageBytes, cur, k_head, v_head, warp, lane);
    }
    ptx::cp_async_commit();
  }
  int stage = 0, issue_stage = T::kStages - 1;
  for (int k = 0; k < num_tiles; ++k) {
    // Tile k landed (own copies), then the barrier: everyone's copies are visible and everyone
    // is done with tile k - 1, whose stage the next copies overwrite.
    ptx::cp_async_wait<T::kStages - 2>();
    __syncthreads();
    const PageRef cur = next;
    next = fetch_page(p, cs, k + T::kStages, warp, lane);
    if (k + T::kStages - 1 < num_tiles) {
      issue_tile<T>(p, bad, ring + issue_stage * T::kStageBytes, cur, k_head, v_head, warp, lane);
    }
    ptx::cp_async_commit();

    const TileInfo tile = tile_info(cs, k);
    const char* k_tile = ring + stage * T::kStageBytes;
    const char* v_tile = k_tile + T::kTileBytes;
    const bool beam_filter = tile.beam >= 0 && several_beams;
    for (int kb = 0; kb < slice_keys / kBlockTokens; ++kb) {
      const int tb = slice_first + kb * kBlockTokens;
      const int key0 = tile.start + tb;
      if (key0 >= tile.end) break;
      const int key_last = key0 + kBlockTokens - 1;
      const bool masked = beam_filter || key0 < cs.full_lo || key_last > cs.full_hi ||
                          key_last >= cs.draft_min || key_last >= tile.end;
      attend_block<T, MmaElt, kFormat>(st, k_tile, v_tile, q_smem, q_regs, m_tile, half, tb, lane,
                                       key0, masked, tile.end, tile.beam, cs.rows, logit);
    }
    stage = stage + 1 == T::kStages ? 0 : stage + 1;
    issue_stage = issue_stage + 1 == T::kStages ? 0 : issue_stage + 1;
  }
  ptx::cp_async_wait<0>();
  __syncthreads();  // the ring is free: the merge buffers reuse it
  report_bad_page(p, cs);

  // ---- cross-group merge: groups of one row tile saw disjoint keys. Both warps of a D = 256
  // pair hold the same m and l (identical S), and disjoint features of o.
  float* merge_o = reinterpret_cast<float*>(ring);   // [group][16][kMergeStride]
  float* merge_m = merge_o + T::kMergeOFloats;       // [group][16]
  float* merge_l = merge_m + T::kGroups * kMmaRows;  // [group][16]
  float* coef = merge_l + T::kGroups * kMmaRows;     // [slice][row of CTA]
  {
    st.store_rows(merge_m + group * kMmaRows, merge_l + group * kMmaRows, g, qd == 0 && half == 0);
    float* wo = merge_o + group * kMmaRows * T::kMergeStride;
#pragma unroll
    for (int n = 0; n < T::kWarpFeatures / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int d = out_feature<kFormat>(half * T::kWarpFeatures, n, qd, e);
        wo[g * T::kMergeStride + d] = st.o[n][e] * o_unscale<kFormat>(n);
        wo[(g + 8) * T::kMergeStride + d] = st.o[n][2 + e] * o_unscale<kFormat>(n);
      }
    }
  }
  __syncthreads();
  if (tid < p.rows_per_cta) {
    const int rr = tid, mt = rr / kMmaRows, r16 = rr % kMmaRows;
    float mmax = -INFINITY;
    for (int s = 0; s < slices; ++s)
      mmax = fmaxf(mmax, merge_m[(s * row_tiles_cta + mt) * kMmaRows + r16]);
    float total = 0.f;
    for (int s = 0; s < slices; ++s) {
      const int w = (s * row_tiles_cta + mt) * kMmaRows + r16;
      const float a = mmax == -INFINITY ? 0.f : exp2f(merge_m[w] - mmax);
      coef[s * kMaxRowsPerCta + rr] = a;
      total += a * merge_l[w];
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    for (int s = 0; s < slices; ++s) coef[s * kMaxRowsPerCta + rr] *= inv;
    cs.row_lse2[rr] = total > 0.f ? mmax + log2f(total) : -INFINITY;
  }
  __syncthreads();
  // Normalized o of CTA row rr, in place into slice 0's buffer rows (= rows 0..rows_per_cta-1):
  // each element is read and written by one thread only. Valid rows only: at batch 1 with 4
  // heads a KV head, 12 of the 16 rows are padding, and this loop is on every CTA's critical
  // path. (The coefficients above cover every row: bounding them by rows_valid as well made
  // ptxas spill 24 bytes in the three-CTA kernel's main loop.)
  for (int idx = tid; idx < rows_valid * (kHeadDim / 4); idx += kThreads) {
    const int rr = idx / (kHeadDim / 4), d = 4 * (idx % (kHeadDim / 4));
    const int mt = rr / kMmaRows, r16 = rr % kMmaRows;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < slices; ++s) {
      const float c = coef[s * kMaxRowsPerCta + rr];
      const float4 v = *reinterpret_cast<const float4*>(
          merge_o + ((s * row_tiles_cta + mt) * kMmaRows + r16) * T::kMergeStride + d);
      acc.x += c * v.x, acc.y += c * v.y, acc.z += c * v.z, acc.w += c * v.w;
    }
    *reinterpret_cast<float4*>(merge_o + rr * T::kMergeStride + d) = acc;
  }
  __syncthreads();

  const int items = rows_valid * (kHeadDim / 8);
  if (p.num_splits == 1) {
    if (tid < rows_valid) {
      cs.row_factor[tid] =
          finish_row(p, request, kv_head, row_begin + tid, cs.row_lse2[tid], scales.v);
    }
    __syncthreads();
    for (int idx = tid; idx < items; idx += kThreads) {
      const int rr = idx / (kHeadDim / 8), d = 8 * (idx % (kHeadDim / 8));
      const float f = cs.row_factor[rr];
      const float4 a = *reinterpret_cast<const float4*>(merge_o + rr * T::kMergeStride + d);
      const float4 b = *reinterpret_cast<const float4*>(merge_o + rr * T::kMergeStride + d + 4);
      const float v[8] = {a.x * f, a.y * f, a.z * f, a.w * f, b.x * f, b.y * f, b.z * f, b.w * f};
      store_out8<Elt>(p, request, kv_head, row_begin + rr, d, v);
    }
    return;
  }

  // ---- split mode: partial to the workspace, then the last CTA of the problem merges.
  const int64_t problem = (int64_t(request) * p.num_kv_heads + kv_head) * p.row_tiles + row_tile;
  const int64_t slot = problem * p.num_splits + split;
  if (tid < rows_valid) p.partial_lse[slot * p.rows_per_cta + tid] = cs.row_lse2[tid];
  float* po = p.partial_o + slot * p.rows_per_cta * kHeadDim;
  // Every valid row is written, empty ones too (their weight is 0): the last CTA loads all
  // splits' o unconditionally, so it never reads memory this launch did not write.
  for (int idx = tid; idx < rows_valid * (kHeadDim / 4); idx += kThreads) {
    const int rr = idx / (kHeadDim / 4), d = 4 * (idx % (kHeadDim / 4));
    *reinterpret_cast<float4*>(po + rr * kHeadDim + d) =
        *reinterpret_cast<const float4*>(merge_o + rr * T::kMergeStride + d);
  }
  if (!last_split_to_finish(p, cs, problem)) return;

  merge_splits<kHeadDim, Elt, T::kMergePrefetch>(p, request, kv_head, row_tile, rows_valid,
                                                 scales.v, reinterpret_cast<float*>(ring));
}

}  // namespace hopattn::kernels::decode
