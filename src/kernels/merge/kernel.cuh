// Merging partial attention states: (o_k, lse_k) over disjoint key sets combine to
// lse = log(sum_k e^lse_k), o = sum_k e^(lse_k - lse) o_k (the arithmetic:
// kernels/common/state_merge.cuh; block shapes and parameters: traits.cuh). Memory-bound. Four
// kernels: merge_vec_kernel (16-byte aligned rows, the usual case): one thread per four 16-byte
// pieces of a row (one piece when the row does not split into fours), its first states' o loads
// issued before the lse math so that bytes are in flight from the start; merge_kernel (any
// layout): one warp per row, one element per load; merge_few_kernel (16-byte rows, at most 16
// states): every lse loaded once, every state's o (or a round of states' o) in flight at once;
// merge_wide_kernel (16-byte rows, many states over few rows): the states split over the thread
// groups of a block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/state_merge.cuh"
#include "kernels/merge/traits.cuh"
#include "ptx/grid_dependency.cuh"

namespace hopattn::kernels::merge {

template <class Elt>
__device__ __forceinline__ float load_elt(const void* base, int64_t i) {
  if constexpr (std::is_same_v<Elt, float>) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (std::is_same_v<Elt, __half>) {
    return __half2float(static_cast<const __half*>(base)[i]);
  } else {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
}

template <class Elt>
__device__ __forceinline__ void store_elt(void* base, int64_t i, float v) {
  if constexpr (std::is_same_v<Elt, float>) {
    static_cast<float*>(base)[i] = v;
  } else if constexpr (std::is_same_v<Elt, __half>) {
    static_cast<__half*>(base)[i] = __float2half_rn(v);
  } else {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
  }
}

// State k of row (t, h): its source and index within it.
__device__ __forceinline__ const Source& source_of(const Params& p, int& k) {
  if (k < p.src[0].n) return p.src[0];
  k -= p.src[0].n;
  return p.src[1];
}

__device__ __forceinline__ float state_lse(const Params& p, int k, int t, int h) {
  const Source& s = source_of(p, k);
  return s.lse[t * s.lse_stride[0] + k * s.lse_stride[1] + h * s.lse_stride[2]];
}

template <class In, class Out>
__global__ void __launch_bounds__(kThreads) merge_kernel(const __grid_constant__ Params p) {
  ptx::wait_for_prior_grids();  // the states may be the output of the kernel before
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= int64_t(p.tokens) * p.heads) return;
  const int t = static_cast<int>(row / p.heads), h = static_cast<int>(row % p.heads);
  const int n = p.src[0].n + (p.num_sources > 1 ? p.src[1].n : 0);

  // Largest lse (a NaN anywhere poisons the result, as in the reference), then the sum.
  float mmax = -INFINITY;
  bool nan = false;
  for (int k = lane; k < n; k += 32) {
    const float l = state_lse(p, k, t, h);
    nan = nan || isnan(l);
    mmax = fmaxf(mmax, l);
  }
  mmax = warp_max(mmax);
  nan = __any_sync(0xffffffffu, nan);
  float total = 0.f;
  if (mmax != -INFINITY) {
    for (int k = lane; k < n; k += 32) total += expf(state_lse(p, k, t, h) - mmax);
  }
  total = warp_sum(total);
  const float merged = nan ? NAN : merged_lse(mmax, total);
  const float inv = total > 0.f ? 1.f / total : 0.f;

  if (p.lse != nullptr && lane == 0) p.lse[t * p.lse_stride[0] + h * p.lse_stride[1]] = merged;
  const int64_t out_row = t * p.out_stride[0] + h * p.out_stride[1];
  for (int d0 = 0; d0 < p.dim; d0 += 32 * kFeaturesPerLane) {
    float acc[kFeaturesPerLane] = {};
    for (int k = 0; k < n; ++k) {
      const float l = state_lse(p, k, t, h);  // same address for the warp: one broadcast load
      // Empty states weigh 0 and are skipped, so their o is never read (0 * NaN would be NaN).
      const float w = nan ? NAN : state_weight(l, mmax, total, inv);
      if (w == 0.f) continue;
      int kk = k;
      const Source& s = source_of(p, kk);
      const int64_t base = t * s.o_stride[0] + kk * s.o_stride[1] + h * s.o_stride[2];
#pragma unroll
      for (int i = 0; i < kFeaturesPerLane; ++i) {
        const int d = d0 + i * 32 + lane;
        if (d < p.dim) acc[i] += w * load_elt<In>(s.o, base + d);
      }
    }
#pragma unroll
    for (int i = 0; i < kFeaturesPerLane; ++i) {
      const int d = d0 + i * 32 + lane;
      if (d < p.dim) store_elt<Out>(p.out, out_row + d, nan ? NAN : acc[i]);
    }
  }
}

// ------------------------------------------------------------------------ 16-byte rows

template <class In>
__device__ __forceinline__ void unpack16(const uint4& raw, float (&f)[kVec<In>]) {
  if constexpr (std::is_same_v<In, float>) {
    f[0] = __uint_as_float(raw.x), f[1] = __uint_as_float(raw.y);
    f[2] = __uint_as_float(raw.z), f[3] = __uint_as_float(raw.w);
  } else {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 v;
      if constexpr (std::is_same_v<In, __half>) {
        v = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      } else {
        v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
      }
      f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
  }
}

// kN floats to kN Outs at `dst` (aligned to min(16, kN * sizeof(Out)) bytes), 16 bytes a store.
template <class Out, int kN>
__device__ __forceinline__ void store_vec(Out* dst, const float (&v)[kN]) {
  if constexpr (std::is_same_v<Out, float>) {
#pragma unroll
    for (int i = 0; i < kN; i += 4) {
      *reinterpret_cast<float4*>(dst + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
    }
  } else {
    uint32_t w[kN / 2];
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      if constexpr (std::is_same_v<Out, __half>) {
        const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&h);
      } else {
        const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&b);
      }
    }
    if constexpr (kN == 8) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      static_assert(kN == 4, "4 or 8 elements");
      *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
    }
  }
}

__device__ __forceinline__ const void* state_o(const Params& p, int k, int t, int h,
                                               int64_t& base) {
  const Source& s = source_of(p, k);
  base = t * s.o_stride[0] + k * s.o_stride[1] + h * s.o_stride[2];
  return s.o;
}

// The row (t, h) of thread blockIdx.x * kVecThreads + threadIdx.x and its elements first_elt ..
// + kElts - 1, for the 16-byte-row kernels (thread i: row i / (dim / kElts)); n states.
template <int kElts>
struct VecThread {
  int t, h, first_elt, n;
  bool valid;
  __device__ explicit VecThread(const Params& p)
      : VecThread(p, int64_t(blockIdx.x) * kVecThreads + threadIdx.x) {}
  __device__ VecThread(const Params& p, int64_t i) {
    const int groups = p.dim / kElts;  // threads per row
    const int64_t row = i / groups;
    valid = row < int64_t(p.tokens) * p.heads;
    first_elt = static_cast<int>(i - row * groups) * kElts;
    t = static_cast<int>(row / p.heads), h = static_cast<int>(row % p.heads);
    n = p.src[0].n + (p.num_sources > 1 ? p.src[1].n : 0);
  }
};

// kP consecutive 16-byte pieces from o on.
template <class In, int kP>
__device__ __forceinline__ void load_pieces(const In* o, uint4 (&raw)[kP]) {
#pragma unroll
  for (int j = 0; j < kP; ++j) raw[j] = __ldg(reinterpret_cast<const uint4*>(o + j * kVec<In>));
}

// State k's kP 16-byte pieces of the thread's row.
template <class In, int kP, int kElts>
__device__ __forceinline__ void load_pieces(const Params& p, int k, const VecThread<kElts>& v,
                                            uint4 (&raw)[kP]) {
  int64_t base;
  load_pieces<In>(static_cast<const In*>(state_o(p, k, v.t, v.h, base)) + base + v.first_elt, raw);
}

// The thread's row in each of kSources sources (element offsets; o from the thread's first
// element on), so that state k's address is a select and an add, not state_o's three 64-bit
// products again for every state of an unrolled kernel. With one source (merge_states_n) no
// state needs a source select at all: ~20% fewer instructions in the 8-state merge_few_kernel.
template <int kSources>
struct SourceRows {
  static_assert(kSources == 1 || kSources == 2, "merge_states_n or merge_states");
  int64_t o[kSources], lse[kSources];
  template <int kElts>
  __device__ SourceRows(const Params& p, const VecThread<kElts>& v) {
#pragma unroll
    for (int s = 0; s < kSources; ++s) {
      const Source& src = p.src[s];
      o[s] = v.t * src.o_stride[0] + v.h * src.o_stride[2] + v.first_elt;
      lse[s] = v.t * src.lse_stride[0] + v.h * src.lse_stride[2];
    }
  }
  // The source of state k (the same for the whole grid); k becomes its index there.
  __device__ static int which(const Params& p, int& k) {
    if (kSources == 1 || k < p.src[0].n) return 0;
    k -= p.src[0].n;
    return 1;
  }
  template <class In>
  __device__ const In* state_o(const Params& p, int k) const {
    const int s = which(p, k);
    const int64_t row = s == 0 ? o[0] : o[kSources - 1];
    return static_cast<const In*>(p.src[s].o) + row + k * p.src[s].o_stride[1];
  }
  __device__ float state_lse(const Params& p, int k) const {
    const int s = which(p, k);
    const int64_t row = s == 0 ? lse[0] : lse[kSources - 1];
    return p.src[s].lse[row + k * p.src[s].lse_stride[1]];
  }
};

// A thread's kP pieces of row (t, h) from element first_elt on (NaN everywhere when `nan`).
template <class Out, int kP, int kN>
__device__ __forceinline__ void store_pieces(const Params& p, int t, int h, int first_elt, bool nan,
                                             float (&acc)[kP][kN]) {
  Out* out = static_cast<Out*>(p.out) + t * p.out_stride[0] + h * p.out_stride[1] + first_elt;
#pragma unroll
  for (int j = 0; j < kP; ++j) {
    if (nan) {
#pragma unroll
      for (int e = 0; e < kN; ++e) acc[j][e] = NAN;
    }
    store_vec<Out, kN>(out + j * kN, acc[j]);
  }
}

// acc += w x the kP 16-byte pieces in raw.
template <class In, int kP, int kN>
__device__ __forceinline__ void add_pieces(float w, const uint4 (&raw)[kP], float (&acc)[kP][kN]) {
#pragma unroll
  for (int j = 0; j < kP; ++j) {
    float f[kN];
    unpack16<In>(raw[j], f);
#pragma unroll
    for (int e = 0; e < kN; ++e) acc[j][e] += w * f[e];
  }
}

// Row (t, h)'s merged lse (NaN when a state's is), by the thread holding its first elements.
__device__ __forceinline__ void store_merged_lse(const Params& p, int t, int h, int first_elt,
                                                 bool nan, float mmax, float total) {
  if (p.lse != nullptr && first_elt == 0) {
    p.lse[t * p.lse_stride[0] + h * p.lse_stride[1]] = nan ? NAN : merged_lse(mmax, total);
  }
}

// Thread i: row i / (pieces / kP), pieces kP * (i % (pieces / kP)) .. + kP - 1 of it, kVec
// elements each. Same arithmetic, in the same order, as merge_kernel.
template <class In, class Out, int kP>
__global__ void __launch_bounds__(kVecThreads, kVecBlocksPerSmFor<kP>)
    merge_vec_kernel(const __grid_constant__ Params p) {
  ptx::wait_for_prior_grids();  // the states may be the output of the kernel before
  constexpr int kN = kVec<In>;
  const VecThread<kN * kP> v(p);
  if (!v.valid) return;
  const int t = v.t, h = v.h, first_elt = v.first_elt, n = v.n;
  auto load_state = [&](int k, uint4(&raw)[kP]) { load_pieces<In>(p, k, v, raw); };

  // The o of the first states does not depend on the weights: in flight during the lse math.
  uint4 first[kVecPrefetch][kP];
#pragma unroll
  for (int k = 0; k < kVecPrefetch; ++k) {
    if (k < n) load_state(k, first[k]);
  }

  float mmax = -INFINITY;
  bool nan = false;
  for (int k = 0; k < n; ++k) {
    const float l = state_lse(p, k, t, h);
    nan = nan || isnan(l);
    mmax = fmaxf(mmax, l);
  }
  float total = 0.f;
  if (mmax != -INFINITY) {
    for (int k = 0; k < n; ++k) total += expf(state_lse(p, k, t, h) - mmax);
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  store_merged_lse(p, t, h, first_elt, nan, mmax, total);

  float acc[kP][kN] = {};
  auto add = [&](int k, const uint4(&raw)[kP]) {
    const float l = state_lse(p, k, t, h);
    // Empty states weigh 0 and their o is ignored, whatever it holds (0 * NaN would be NaN).
    const float w = state_weight(l, mmax, total, inv);
    if (w != 0.f) add_pieces<In>(w, raw, acc);
  };
#pragma unroll
  for (int k = 0; k < kVecPrefetch; ++k) {
    if (k < n) add(k, first[k]);
  }
  for (int k = kVecPrefetch; k < n; k += kVecPrefetch) {
    uint4 raw[kVecPrefetch][kP];
#pragma unroll
    for (int u = 0; u < kVecPrefetch; ++u) {
      if (k + u < n) load_state(k + u, raw[u]);
    }
#pragma unroll
    for (int u = 0; u < kVecPrefetch; ++u) {
      if (k + u < n) add(k + u, raw[u]);
    }
  }
  store_pieces<Out>(p, t, h, first_elt, nan, acc);
}

// At most kStates states (n <= kStates; merge_states' two among them): every lse loaded once into
// registers and the o of kStates / kRounds states in flight at once, all loops unrolled over
// compile-time state indices. The general kernel's runtime-n loops fall into their remainder
// paths for small n and reload each lse, one waited-for load after another (2.2 against 3.9 TB/s
// on two bf16 states, tools/merge_variants.cu). Same arithmetic, in the same order, as
// merge_kernel. kRounds > 1 trades a DRAM latency a round for registers (the o of 16 states of
// one piece alone would take 64); kSources: 1 for merge_states_n, 2 for merge_states.
template <class In, class Out, int kP, int kStates, int kSources,
          int kMinBlocks = kFewBlocksPerSm<kStates>, int kRounds = kFewRounds<kStates>>
__global__ void __launch_bounds__(kVecThreads, kMinBlocks)
    merge_few_kernel(const __grid_constant__ Params p) {
  ptx::wait_for_prior_grids();  // the states may be the output of the kernel before
  static_assert(kStates % kRounds == 0, "whole rounds of states");
  constexpr int kN = kVec<In>;
  constexpr int kBatch = kStates / kRounds;  // states whose o is in flight at once
  const VecThread<kN * kP> v(p);
  if (!v.valid) return;
  const int t = v.t, h = v.h, first_elt = v.first_elt, n = v.n;
  const SourceRows<kSources> rows(p, v);

  // Slots past n load state n - 1 again (valid memory, weight 0): no branch around any load, so
  // that every load of a round is issued before the first one is waited for.
  uint4 raw[kBatch][kP];
  auto load_round = [&](int r) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int k = r * kBatch + u;
      load_pieces<In>(rows.template state_o<In>(p, k < n ? k : n - 1), raw[u]);
    }
  };
  load_round(0);
  float lse[kStates];
#pragma unroll
  for (int k = 0; k < kStates; ++k) {
    const float l = rows.state_lse(p, k < n ? k : n - 1);
    lse[k] = k < n ? l : -INFINITY;
  }

  float mmax = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int k = 0; k < kStates; ++k) {
    nan = nan || isnan(lse[k]);
    mmax = fmaxf(mmax, lse[k]);
  }
  // e^(lse - top) of each state, computed once for the total and the weight:
  // state_weight(lse, top, total, inv) is e x inv, 0 for an empty state (e^-inf = 0; the slots
  // past n too) and for a row of only empty states (every e and inv 0).
  float e[kStates];
  float total = 0.f;
#pragma unroll
  for (int k = 0; k < kStates; ++k) {
    e[k] = mmax != -INFINITY ? expf(lse[k] - mmax) : 0.f;
    total += e[k];
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  store_merged_lse(p, t, h, first_elt, nan, mmax, total);

  float acc[kP][kN] = {};
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      if (r * kBatch >= n) break;  // the rest weighs 0; n is the same for the whole grid
      load_round(r);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      // Empty states weigh 0 and their o is ignored, whatever it holds (0 * NaN would be NaN).
      const float w = e[r * kBatch + u] * inv;
      if (w != 0.f) add_pieces<In>(w, raw[u], acc);
    }
  }
  store_pieces<Out>(p, t, h, first_elt, nan, acc);
}

// Many states over few rows (the split partials of one long request): merge_vec_kernel would
// run a few thousand threads, each walking all n states kVecPrefetch at a time, one DRAM latency
// after another (64 states of 128 x 512 fp32: 66 us for 17 MB). Here the kWideGroups thread
// groups of a block take the same pieces and split the states (group g: states g, g + kWideGroups,
// ...); top, total and the sums meet in shared memory, added in group order (deterministic).
// Each group's first kWideBatch states (all of them up to kWideGroups * kWideBatch states) have
// their lse and o loaded together before the reductions and kept in registers, so that such a
// merge waits for one DRAM latency; later states follow kWideBatch at a time. (Loading o only
// after the lse passes, each state's lse a waited-for load, took 17.7 us for those 17 MB: ncu,
// run set o.)
template <class In, class Out>
__global__ void __launch_bounds__(kVecThreads, kWideBlocksPerSm)
    merge_wide_kernel(const __grid_constant__ Params p) {
  ptx::wait_for_prior_grids();  // the states may be the output of the kernel before
  constexpr int kN = kVec<In>;
  constexpr int kLanes = kVecThreads / kWideGroups<In>;
  constexpr int kStride = kWideGroups<In> * kWideBatch<In>;  // states between a group's batches
  const int g = static_cast<int>(threadIdx.x) / kLanes,
            lane = static_cast<int>(threadIdx.x) % kLanes;
  const VecThread<kN> v(p, int64_t(blockIdx.x) * kLanes + lane);
  const int t = v.t, h = v.h, n = v.valid ? v.n : 0;  // no early return: barriers follow
  __shared__ float s_top[kWideGroups<In>][kLanes], s_total[kWideGroups<In>][kLanes];
  __shared__ bool s_nan[kWideGroups<In>][kLanes];
  __shared__ float s_acc[kWideGroups<In>][kLanes][kN];

  // Every state's lse of a batch is loaded before any is used (one latency a batch); a slot
  // past n holds lse -inf (weight 0). load_batch: the batch's o too, all in flight together.
  const auto batch_lse = [&](int k0, float(&l)[kWideBatch<In>]) {
#pragma unroll
    for (int u = 0; u < kWideBatch<In>; ++u) {
      const int k = k0 + u * kWideGroups<In>;
      l[u] = k < n ? state_lse(p, k, t, h) : -INFINITY;
    }
  };
  const auto load_batch = [&](int k0, float(&l)[kWideBatch<In>], uint4(&raw)[kWideBatch<In>][1]) {
#pragma unroll
    for (int u = 0; u < kWideBatch<In>; ++u) {
      const int k = k0 + u * kWideGroups<In>;
      if (k < n) load_pieces<In>(p, k, v, raw[u]);
    }
    batch_lse(k0, l);
  };
  float first_lse[kWideBatch<In>];
  uint4 first_raw[kWideBatch<In>][1];
  load_batch(g, first_lse, first_raw);

  float top = -INFINITY;
  bool nan = false;
  const auto fold_top = [&](const float(&l)[kWideBatch<In>]) {
#pragma unroll
    for (int u = 0; u < kWideBatch<In>; ++u) {
      nan = nan || isnan(l[u]);
      top = fmaxf(top, l[u]);
    }
  };
  fold_top(first_lse);
  for (int k0 = g + kStride; k0 < n; k0 += kStride) {
    float l[kWideBatch<In>];
    batch_lse(k0, l);
    fold_top(l);
  }
  s_top[g][lane] = top;
  s_nan[g][lane] = nan;
  __syncthreads();
  float mmax = -INFINITY;
  nan = false;
#pragma unroll
  for (int j = 0; j < kWideGroups<In>; ++j) {
    mmax = fmaxf(mmax, s_top[j][lane]);
    nan = nan || s_nan[j][lane];
  }
  float part = 0.f;
  if (mmax != -INFINITY) {
    // In state order within the group, as the weighted sums below.
    const auto add_exps = [&](const float(&l)[kWideBatch<In>]) {
#pragma unroll
      for (int u = 0; u < kWideBatch<In>; ++u) {
        if (l[u] != -INFINITY) part += expf(l[u] - mmax);
      }
    };
    add_exps(first_lse);
    for (int k0 = g + kStride; k0 < n; k0 += kStride) {
      float l[kWideBatch<In>];
      batch_lse(k0, l);
      add_exps(l);
    }
  }
  s_total[g][lane] = part;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int j = 0; j < kWideGroups<In>; ++j) total += s_total[j][lane];
  const float inv = total > 0.f ? 1.f / total : 0.f;

  float acc[1][kN] = {};
  const auto add_batch = [&](const float(&l)[kWideBatch<In>],
                             const uint4(&raw)[kWideBatch<In>][1]) {
#pragma unroll
    for (int u = 0; u < kWideBatch<In>; ++u) {
      // Empty states (and slots past n) weigh 0 and their o is ignored, whatever it holds
      // (0 * NaN would be NaN).
      const float w = state_weight(l[u], mmax, total, inv);
      if (w != 0.f) add_pieces<In>(w, raw[u], acc);
    }
  };
  add_batch(first_lse, first_raw);
  for (int k0 = g + kStride; k0 < n; k0 += kStride) {
    float l[kWideBatch<In>];
    uint4 raw[kWideBatch<In>][1];
    load_batch(k0, l, raw);
    add_batch(l, raw);
  }
#pragma unroll
  for (int e = 0; e < kN; ++e) s_acc[g][lane][e] = acc[0][e];
  __syncthreads();
  if (g != 0 || !v.valid) return;
#pragma unroll
  for (int j = 1; j < kWideGroups<In>; ++j) {
#pragma unroll
    for (int e = 0; e < kN; ++e) acc[0][e] += s_acc[j][lane][e];
  }
  store_merged_lse(p, t, h, v.first_elt, nan, mmax, total);
  store_pieces<Out>(p, t, h, v.first_elt, nan, acc);
}

}  // namespace hopattn::kernels::merge
