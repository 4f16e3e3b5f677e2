// Decode kernel, part 3 of 3: the kernel (one CTA = one request x one KV head x one row tile x
// one split of the keys), its epilogue (cross-warp merge; output, or partials and the last-block
// merge of the splits) and the host-side launch of one instantiation. Schedule and rationale:
// README.md beside this file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/decode/mainloop.cuh"
#include "ptx/atomic.cuh"

namespace hopattn::kernels::decode {

// ------------------------------------------------------------------------------ epilogue

// log2(2^lse2 + 2^sink2): the sink joins the denominator only (DESIGN.md).
__device__ __forceinline__ float add_sink(float lse2, float sink2) {
  const float mx = fmaxf(lse2, sink2);
  return mx + log2f(exp2f(lse2 - mx) + exp2f(sink2 - mx));
}

// Final lse (natural log) and output scale of request row `row` from its sink-free log2 lse.
__device__ __forceinline__ float finish_row(const Params& p, int request, int kv_head, int row,
                                            float lse2, float v_scale) {
  const int w = row / (p.q_len * p.group);
  const int i = (row / p.group) % p.q_len;
  const int h = kv_head * p.group + row % p.group;
  float total = lse2;
  if (p.sinks != nullptr) total = add_sink(lse2, p.sinks[h * p.sinks_stride] * kLog2e);
  if (p.lse != nullptr) {
    const int b = request * p.beam_width + w;
    p.lse[b * p.lse_stride[0] + i * p.lse_stride[1] + h * p.lse_stride[2]] =
        total == -INFINITY ? -INFINITY : total * kLn2;
  }
  return lse2 == -INFINITY ? 0.f : exp2f(lse2 - total) * v_scale;
}

template <class Elt>
__device__ __forceinline__ void store_out8(const Params& p, int request, int kv_head, int row,
                                           int d, const float (&v)[8]) {
  const int w = row / (p.q_len * p.group);
  const int i = (row / p.group) % p.q_len;
  const int h = kv_head * p.group + row % p.group;
  const int64_t offset = (request * p.beam_width + w) * p.out_stride[0] + i * p.out_stride[1] +
                         h * p.out_stride[2] + d;
  const uint4 packed = make_uint4(ptx::pack2<Elt>(v[0], v[1]), ptx::pack2<Elt>(v[2], v[3]),
                                  ptx::pack2<Elt>(v[4], v[5]), ptx::pack2<Elt>(v[6], v[7]));
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.out) + offset) = packed;
}

template <class Elt>
__device__ __forceinline__ void store_out4(const Params& p, int request, int kv_head, int row,
                                           int d, float4 v) {
  const int w = row / (p.q_len * p.group);
  const int i = (row / p.group) % p.q_len;
  const int h = kv_head * p.group + row % p.group;
  const int64_t offset = (request * p.beam_width + w) * p.out_stride[0] + i * p.out_stride[1] +
                         h * p.out_stride[2] + d;
  const uint2 packed = make_uint2(ptx::pack2<Elt>(v.x, v.y), ptx::pack2<Elt>(v.z, v.w));
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.out) + offset) = packed;
}

// Merge of a problem's split partials, the first `rows` rows of the row tile, into out and lse.
// Weights of every (row, split): w = 2^(lse_s - max) / sum * (output factor of the row), in
// `weight` (shared, rows x num_splits floats). Every thread of the CTA calls it.
template <int kHeadDim, class Elt>
__device__ __forceinline__ void merge_splits(const Params& p, int request, int kv_head,
                                             int row_tile, int rows, float v_scale, float* weight) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int row_begin = row_tile * p.rows_per_cta;
  const int64_t problem = (int64_t(request) * p.num_kv_heads + kv_head) * p.row_tiles + row_tile;
  // One warp a row, lanes over the splits: at batch 1 this merge is on the critical path of the
  // whole launch, so no thread walks the splits alone.
  const int splits = p.num_splits;
  const float* lse_all = p.partial_lse + problem * splits * p.rows_per_cta;
  for (int rr = warp; rr < rows; rr += kWarps) {
    float* w = weight + rr * splits;
    float mmax = -INFINITY;
    for (int s = lane; s < splits; s += 32) {
      w[s] = __ldcg(lse_all + s * p.rows_per_cta + rr);
      mmax = fmaxf(mmax, w[s]);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, off));
    }
    float total = 0.f;
    for (int s = lane; s < splits; s += 32) {
      w[s] = mmax == -INFINITY ? 0.f : exp2f(w[s] - mmax);
      total += w[s];
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) total += __shfl_xor_sync(0xffffffffu, total, off);
    float scale = 0.f;
    if (lane == 0) {
      const float lse2 = total > 0.f ? mmax + log2f(total) : -INFINITY;
      const float f = finish_row(p, request, kv_head, row_begin + rr, lse2, v_scale);
      scale = total > 0.f ? f / total : 0.f;
    }
    scale = __shfl_sync(0xffffffffu, scale, 0);
    for (int s = lane; s < splits; s += 32) w[s] *= scale;
  }
  __syncthreads();
  if constexpr (kHeadDim == 256) {
    // D = 256 runs at 255 registers, and the unrolled loop below makes ptxas spill there (32
    // bytes, ptxas 13.0): one split at a time, 8 features a thread.
    const float* o_all = p.partial_o + problem * splits * p.rows_per_cta * kHeadDim;
    for (int idx = tid; idx < rows * (kHeadDim / 8); idx += kThreads) {
      const int rr = idx / (kHeadDim / 8), d = 8 * (idx % (kHeadDim / 8));
      const float* w = weight + rr * splits;
      float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int s = 0; s < splits; ++s) {
        const float c = w[s];
        if (c == 0.f) continue;  // empty split: weight 0
        const float4* src = reinterpret_cast<const float4*>(
            o_all + (int64_t(s) * p.rows_per_cta + rr) * kHeadDim + d);
        const float4 a = __ldcg(src), b = __ldcg(src + 1);
        v[0] += c * a.x, v[1] += c * a.y, v[2] += c * a.z, v[3] += c * a.w;
        v[4] += c * b.x, v[5] += c * b.y, v[6] += c * b.z, v[7] += c * b.w;
      }
      store_out8<Elt>(p, request, kv_head, row_begin + rr, d, v);
    }
  } else {
    // Thread per (row, 4 features), the splits unrolled by kUnroll with every load issued before
    // the first use: kUnroll L2 round trips in flight instead of one.
    constexpr int kUnroll = 16;
    const float* o_all = p.partial_o + problem * splits * p.rows_per_cta * kHeadDim;
    for (int idx = tid; idx < rows * (kHeadDim / 4); idx += kThreads) {
      const int rr = idx / (kHeadDim / 4), d = 4 * (idx % (kHeadDim / 4));
      const float* w = weight + rr * splits;
      const float* src = o_all + int64_t(rr) * kHeadDim + d;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s0 = 0; s0 < splits; s0 += kUnroll) {
        float4 x[kUnroll];
        float c[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int s = s0 + u;
          c[u] = s < splits ? w[s] : 0.f;
          x[u] = s < splits ? __ldcg(reinterpret_cast<const float4*>(
                                  src + int64_t(s) * p.rows_per_cta * kHeadDim))
                            : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          // An empty split weighs 0 and its o is ignored, whatever it holds (0 * NaN is NaN).
          if (c[u] != 0.f) {
            acc.x += c[u] * x[u].x, acc.y += c[u] * x[u].y;
            acc.z += c[u] * x[u].z, acc.w += c[u] * x[u].w;
          }
        }
      }
      store_out4<Elt>(p, request, kv_head, row_begin + rr, d, acc);
    }
  }
}

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
  if constexpr (T::kQInRegisters) {
#pragma unroll
    for (int c = 0; c < kHeadDim / 64; ++c) {
      uint32_t qa[4][4];
      load_q_chunk<T>(q_smem, m_tile, c, lane, qa);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int r = 0; r < 4; ++r) q_regs[4 * c + i][r] = qa[i][r];
      }
    }
  }

  const float k_scale =
      p.k_scale_per_head != nullptr ? p.k_scale_per_head[kv_head * p.k_scale_stride] : p.k_scale;
  const float v_scale =
      p.v_scale_per_head != nullptr ? p.v_scale_per_head[kv_head * p.v_scale_stride] : p.v_scale;
  LogitTransform logit;
  logit.softcap = p.softcap > 0.f;
  logit.mul =
      (logit.softcap ? p.softmax_scale * k_scale / p.softcap : p.softmax_scale * k_scale * kLog2e) *
      q_unscale;
  logit.post = p.softcap * kLog2e;

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
  // Prologue: tiles 0 .. kStages-2 in flight, each page lookup one tile ahead of its copies.
  PageRef next = fetch_page(p, cs, 0, warp, lane);
#pragma unroll 1
  for (int s = 0; s < T::kStages - 1; ++s) {
    const PageRef cur = next;
    next = fetch_page(p, cs, s + 1, warp, lane);
    if (s < num_tiles) {
      issue_tile<T>(p, cs, ring + s * T::kStageBytes, cur, k_head, v_head, warp, lane);
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
      issue_tile<T>(p, cs, ring + issue_stage * T::kStageBytes, cur, k_head, v_head, warp, lane);
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
    float l[2] = {st.l[0], st.l[1]};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    if (qd == 0 && half == 0) {
      merge_m[group * kMmaRows + g] = st.m[0];
      merge_m[group * kMmaRows + g + 8] = st.m[1];
      merge_l[group * kMmaRows + g] = l[0];
      merge_l[group * kMmaRows + g + 8] = l[1];
    }
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
  // each element is read and written by one thread only.
  for (int idx = tid; idx < p.rows_per_cta * (kHeadDim / 4); idx += kThreads) {
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
          finish_row(p, request, kv_head, row_begin + tid, cs.row_lse2[tid], v_scale);
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
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const uint32_t last = static_cast<uint32_t>(p.num_splits - 1);
    cs.is_last = ptx::atomic_inc_acq_rel_gpu(p.semaphores + problem, last) == last ? 1u : 0u;
  }
  __syncthreads();
  if (cs.is_last == 0) return;
  __threadfence();

  merge_splits<kHeadDim, Elt>(p, request, kv_head, row_tile, rows_valid, v_scale,
                              reinterpret_cast<float*>(ring));
}

// ------------------------------------------------------------------------------ host launch

// Launches one instantiation; the dynamic shared-memory limit is raised once per device.
template <int kHeadDim, class Elt, KvFormat kFormat, int kCtasPerSm = 2>
cudaError_t launch_variant(const Params& p, dim3 grid, cudaStream_t stream) {
  using T = Traits<kHeadDim, kv_format_bytes(kFormat), kCtasPerSm>;
  auto* kernel = &decode_kernel<kHeadDim, Elt, kFormat, kCtasPerSm>;
  static std::atomic<uint64_t> configured{0};  // bit d: device d done
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit == 0 || (configured.load(std::memory_order_relaxed) & bit) == 0) {
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  T::smem_bytes(T::kMaxRows));
    if (status != cudaSuccess) return status;
    configured.fetch_or(bit, std::memory_order_relaxed);
  }
  kernel<<<grid, kThreads, T::smem_bytes(p.rows_per_cta), stream>>>(p);
  return cudaGetLastError();
}

template <int kHeadDim, class Elt>
cudaError_t launch_for_format(const Params& p, KvFormat format, dim3 grid, cudaStream_t stream,
                              int ctas_per_sm) {
  switch (format) {
    case KvFormat::kNative16:
      if constexpr (has_three_cta_variant(kHeadDim, std::is_same_v<Elt, __nv_bfloat16>,
                                          KvFormat::kNative16)) {
        if (ctas_per_sm == 3) {
          return launch_variant<kHeadDim, Elt, KvFormat::kNative16, 3>(p, grid, stream);
        }
      }
      return launch_variant<kHeadDim, Elt, KvFormat::kNative16>(p, grid, stream);
    case KvFormat::kE4M3:
      return launch_variant<kHeadDim, Elt, KvFormat::kE4M3>(p, grid, stream);
    case KvFormat::kE5M2:
      return launch_variant<kHeadDim, Elt, KvFormat::kE5M2>(p, grid, stream);
    case KvFormat::kInt8:
      return launch_variant<kHeadDim, Elt, KvFormat::kInt8>(p, grid, stream);
  }
  return cudaErrorInvalidValue;
}

// Every (q dtype, KV format) kernel of one head dim; explicitly instantiated in hd<D>.cu.
template <int kHeadDim>
cudaError_t launch_for_head_dim(const Params& p, bool bf16, KvFormat format, int ctas_per_sm,
                                dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_for_format<kHeadDim, __nv_bfloat16>(p, format, grid, stream, ctas_per_sm)
              : launch_for_format<kHeadDim, __half>(p, format, grid, stream, ctas_per_sm);
}

}  // namespace hopattn::kernels::decode
