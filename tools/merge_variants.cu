// Merge-kernel variants: why hopattn's merge_vec_kernel (src/kernels/merge/kernel.cuh) reaches
// ~2.2 TB/s on merge_states (T = 16384, H = 32, D = 128, bf16) where FlashInfer's merge_state
// reaches ~4.07 TB/s. Each variant merges two states (o_a, lse_a), (o_b, lse_b) per (t, h) row:
//   m = max(lse_a, lse_b), w_k = e^(lse_k - m) / (e^(lse_a - m) + e^(lse_b - m)),
//   out = w_a o_a + w_b o_b (fp32, rounded to bf16), lse = m + log(sum)
// An empty state (lse = -inf) weighs 0 and its o is ignored (the test fills such o with NaN);
// both empty: out = 0, lse = -inf; a NaN lse makes the row NaN.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//        -o /tmp/merge_variants tools/merge_variants.cu   (from the repository root)
//   /tmp/merge_variants [tokens heads dim]
// Per variant: PASS/FAIL against a CPU reference (variant 0 exempt), then the median of 20
// launches, each after a 200 MB memset that flushes L2, CUDA events around the kernel only.
// TB/s counts the bytes the variant must move; "/copy" and "/cur" are TB/s ratios to variants 0
// and 1. Exits 1 on any CUDA error, 2 when a variant FAILs.
// H200, default shape, this file as written (TB/s): 0 copy 3.95 | 1 current 2.22 | 2 block per
// token 4.09 | 3 pipelined 3.89 | 4 = 2 + hints 3.65 | 5 2 pieces 4.07 | 6 interleaved 2.36 |
// 7 = 3 + hints 3.45 | 8 warp tile 3.95 | 9 current kP=1 1.90 | 10/11 32-bit div 2.24/1.93 |
// 12/13 current, n = 2 fixed and lse loaded once 3.88/3.32. So neither layout (6), occupancy (9)
// nor divisions (10, 11) explain variant 1: the runtime-n lse loops do (12; see kTwo below).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../src/kernels/common/state_merge.cuh"  // merged_lse, state_weight: hopattn's exact arithmetic
#include "cuda_check.cuh"

using hopattn::kernels::merged_lse;
using hopattn::kernels::state_weight;
using bf16 = __nv_bfloat16;

// ------------------------------------------------------------------ variant 1: hopattn's kernel
// A faithful copy of merge_vec_kernel<bf16, bf16, 4> and the Params it reads (traits.cuh): the
// generic [T, n, H, D] strided sources, source_of indirection, 64-bit row / piece divisions,
// kVecPrefetch = 2 states' o loads issued before the lse math, 256 threads, (256, 2) bounds.
// kInterleave = true (variant 6) changes one thing only: a thread's kP pieces of its row sit
// groups * 16 B apart instead of side by side, so that one warp load covers 64 B runs of a row
// (whole sectors) instead of 32 scattered 16 B halves of sectors, lanes 64 B apart.
namespace cur {
constexpr int kVecThreads = 256, kVecPrefetch = 2, kN = 8;
struct Source {
  const void* o;
  int64_t o_stride[3];
  const float* lse;
  int64_t lse_stride[3];
  int n;
};
struct Params {
  Source src[2];
  int num_sources;
  int tokens, heads, dim;
  void* out;
  int64_t out_stride[2];
  float* lse;
  int64_t lse_stride[2];
};
__device__ __forceinline__ const Source& source_of(const Params& p, int& k) {
  if (k < p.src[0].n) return p.src[0];
  k -= p.src[0].n;
  return p.src[1];
}
__device__ __forceinline__ float state_lse(const Params& p, int k, int t, int h) {
  const Source& s = source_of(p, k);
  return s.lse[t * s.lse_stride[0] + k * s.lse_stride[1] + h * s.lse_stride[2]];
}
__device__ __forceinline__ const void* state_o(const Params& p, int k, int t, int h,
                                               int64_t& base) {
  const Source& s = source_of(p, k);
  base = t * s.o_stride[0] + k * s.o_stride[1] + h * s.o_stride[2];
  return s.o;
}
__device__ __forceinline__ void unpack16(const uint4& raw, float (&f)[kN]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    f[2 * i] = v.x, f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void store_vec(bf16* dst, const float (&v)[kN]) {
  uint32_t w[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

// kMinBlocks: hopattn's kVecBlocksPerSmFor<kP> (2 for kP = 4, 6 for kP = 1). kP = 4 with 3 or 4
// CTAs an SM spills (80 / 64 registers), so occupancy is tested through kP = 1 (variant 9).
// kIdx32 (variants 10, 11): the two divisions (thread -> row, row -> token / head) in 32-bit
// unsigned arithmetic instead of 64-bit (a run-time branch to a 32-bit path, else a ~70-instruction
// routine); the rest as is.
// kTwo (variants 12, 13): n = 2 known at compile time and each state's lse loaded once, up front,
// into registers. The general kernel's loops over a runtime n are unrolled by 4, so n = 2 runs the
// remainder loop: lse_a, then lse_b, each load waited on before the next is issued, then the sum
// loop and add() load them again (add() after the lse store, which may alias): a serial chain of
// dependent loads per thread, ~1100 instructions of strided address math, at 512 threads an SM.
template <int kP, bool kInterleave, bool kIdx32 = false, bool kTwo = false,
          int kMinBlocks = kP == 1 ? 6 : 2>
__global__ void __launch_bounds__(kVecThreads, kMinBlocks)
    merge_vec_kernel(const __grid_constant__ Params p) {
  const int groups = p.dim / (kN * kP);
  int64_t row;
  int g, t, h;
  if constexpr (kIdx32) {
    const uint32_t i = blockIdx.x * kVecThreads + threadIdx.x, r = i / uint32_t(groups);
    if (r >= uint32_t(p.tokens) * uint32_t(p.heads)) return;
    g = int(i - r * groups), t = int(r / uint32_t(p.heads)), h = int(r - uint32_t(t) * p.heads);
    row = r;
  } else {
    const int64_t i = int64_t(blockIdx.x) * kVecThreads + threadIdx.x;
    row = i / groups;
    if (row >= int64_t(p.tokens) * p.heads) return;
    g = static_cast<int>(i - row * groups);
    t = static_cast<int>(row / p.heads), h = static_cast<int>(row % p.heads);
  }
  const int first_elt = kInterleave ? g * kN : g * kN * kP;
  const int piece_step = kInterleave ? groups * kN : kN;  // elements between a thread's pieces
  (void)row;
  const int n = kTwo ? 2 : p.src[0].n + (p.num_sources > 1 ? p.src[1].n : 0);
  float lse2[2] = {};
  auto lse_of = [&](int k) { return kTwo ? lse2[k] : state_lse(p, k, t, h); };
  auto load_state = [&](int k, uint4(&raw)[kP]) {
    int64_t base;
    const bf16* o = static_cast<const bf16*>(state_o(p, k, t, h, base)) + base + first_elt;
#pragma unroll
    for (int j = 0; j < kP; ++j) raw[j] = __ldg(reinterpret_cast<const uint4*>(o + j * piece_step));
  };
  uint4 first[kVecPrefetch][kP];
#pragma unroll
  for (int k = 0; k < kVecPrefetch; ++k) {
    if (k < n) load_state(k, first[k]);
  }
  if constexpr (kTwo) lse2[0] = state_lse(p, 0, t, h), lse2[1] = state_lse(p, 1, t, h);
  float mmax = -INFINITY;
  bool nan = false;
  for (int k = 0; k < n; ++k) {
    const float l = lse_of(k);
    nan = nan || isnan(l);
    mmax = fmaxf(mmax, l);
  }
  float total = 0.f;
  if (mmax != -INFINITY) {
    for (int k = 0; k < n; ++k) total += expf(lse_of(k) - mmax);
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  if (p.lse != nullptr && g == 0) {
    p.lse[t * p.lse_stride[0] + h * p.lse_stride[1]] = nan ? NAN : merged_lse(mmax, total);
  }
  float acc[kP][kN] = {};
  auto add = [&](int k, const uint4(&raw)[kP]) {
    const float w = state_weight(lse_of(k), mmax, total, inv);
    if (w == 0.f) return;
#pragma unroll
    for (int j = 0; j < kP; ++j) {
      float f[kN];
      unpack16(raw[j], f);
#pragma unroll
      for (int e = 0; e < kN; ++e) acc[j][e] += w * f[e];
    }
  };
#pragma unroll
  for (int k = 0; k < kVecPrefetch; ++k) {
    if (k < n) add(k, first[k]);
  }
  for (int k = kVecPrefetch; k < n; k += kVecPrefetch) {  // n = 2 here: never runs
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
  bf16* out = static_cast<bf16*>(p.out) + t * p.out_stride[0] + h * p.out_stride[1] + first_elt;
#pragma unroll
  for (int j = 0; j < kP; ++j) {
    if (nan) {
#pragma unroll
      for (int e = 0; e < kN; ++e) acc[j][e] = NAN;
    }
    store_vec(out + j * piece_step, acc[j]);
  }
}
}  // namespace cur

// ------------------------------------------------------------- shared pieces of the new variants
// Contiguous [T, H, D] bf16 viewed as 16-byte pieces (8 features), ppr = D / 8 pieces per row;
// piece p belongs to row p / ppr. All index math 32-bit (host checks rows * ppr < 2^31).
struct Args {
  const uint4* oa;
  const uint4* ob;
  const float* lsea;
  const float* lseb;
  uint4* out;
  float* lse_out;
};

struct Weights {
  float wa, wb, lse;  // wa = wb = NaN for a NaN row, so that the products poison it
};

// hopattn's two-pass arithmetic specialised to two states (same expf / logf calls, same order).
__device__ __forceinline__ Weights weights2(float la, float lb) {
  const bool nan = isnan(la) || isnan(lb);
  const float top = fmaxf(la, lb);
  const float total = top == -INFINITY ? 0.f : expf(la - top) + expf(lb - top);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  Weights w;
  w.wa = nan ? NAN : state_weight(la, top, total, inv);
  w.wb = nan ? NAN : state_weight(lb, top, total, inv);
  w.lse = nan ? NAN : merged_lse(top, total);
  return w;
}

// w_a a + w_b b for 8 bf16s. A zero weight zeroes its raw piece first (4 selects, not 8), so an
// empty state's o is ignored whatever it holds.
__device__ __forceinline__ uint4 combine(uint4 a, uint4 b, float wa, float wb) {
  if (wa == 0.f) a = make_uint4(0, 0, 0, 0);
  if (wb == 0.f) b = make_uint4(0, 0, 0, 0);
  const uint32_t ia[4] = {a.x, a.y, a.z, a.w}, ib[4] = {b.x, b.y, b.z, b.w};
  uint32_t r[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ia[i]));
    const float2 fb = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ib[i]));
    const __nv_bfloat162 o = __floats2bfloat162_rn(wa * fa.x + wb * fb.x, wa * fa.y + wb * fb.y);
    r[i] = *reinterpret_cast<const uint32_t*>(&o);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// kStream: o loads skip L1 allocation and ask L2 for 256 B prefetch; stores are evict-first (.cs).
template <bool kStream>
__device__ __forceinline__ uint4 ld_o(const uint4* p) {
  if constexpr (kStream) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
  } else {
    return __ldg(p);
  }
}
template <bool kStream>
__device__ __forceinline__ void st_o(uint4* p, uint4 v) {
  if constexpr (kStream) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
  } else {
    *p = v;
  }
}
template <bool kStream>
__device__ __forceinline__ void st_lse(float* p, float v) {
  if constexpr (kStream)
    __stcs(p, v);
  else
    *p = v;
}

// ---------------------------------------------------------------------- variant 0: copy ceiling
// out = o_a + o_b, no lse: the same o traffic with no merge logic, the target to approach.
// Persistent grid-stride, two pieces a thread per step (4 loads issued before the 2 stores).
__global__ void __launch_bounds__(256) copy_ceiling(Args a, uint32_t total) {
  const uint32_t stride = gridDim.x * 256;
  for (uint32_t p = blockIdx.x * 256 + threadIdx.x; p < total; p += 2 * stride) {
    const bool two = p + stride < total;
    const uint4 x0 = __ldg(a.oa + p), y0 = __ldg(a.ob + p);
    uint4 x1 = make_uint4(0, 0, 0, 0), y1 = x1;
    if (two) x1 = __ldg(a.oa + p + stride), y1 = __ldg(a.ob + p + stride);
    a.out[p] = combine(x0, y0, 1.f, 1.f);
    if (two) a.out[p + stride] = combine(x1, y1, 1.f, 1.f);
  }
}

// ------------------------------------------------------- variants 2, 4: one CTA per token
// FlashInfer's merge_state layout: block (ppr, heads-per-block), thread (x, y) merges piece x of
// head y of token blockIdx.x; every thread loads its row's two lse (one broadcast request per
// row) and its two o pieces, no loop, no 64-bit math; 512 threads (D = 128, H = 32). kStream = 4.
template <bool kStream>
__global__ void __launch_bounds__(1024) block_per_token(Args a, uint32_t heads) {
  const uint32_t h = blockIdx.y * blockDim.y + threadIdx.y;
  if (h >= heads) return;
  const uint32_t row = blockIdx.x * heads + h, p = row * blockDim.x + threadIdx.x;
  const uint4 x = ld_o<kStream>(a.oa + p), y = ld_o<kStream>(a.ob + p);
  const Weights w = weights2(__ldg(a.lsea + row), __ldg(a.lseb + row));
  st_o<kStream>(a.out + p, combine(x, y, w.wa, w.wb));
  if (threadIdx.x == 0) st_lse<kStream>(a.lse_out + row, w.lse);
}

// ------------------------------------------------- variants 3, 7: persistent, software-pipelined
// SMs x (occupancy) CTAs; thread walks pieces gtid, gtid + stride, ... (warp loads contiguous).
// The next piece's o and lse loads are issued before the current piece's math and store, so
// every thread has 2 pieces of each state in flight across its whole life, and no CTA launch /
// tail cost per few rows. kStream = variant 7.
template <bool kStream>
__global__ void __launch_bounds__(256, 6)
    grid_stride_pipelined(Args a, uint32_t total, uint32_t ppr) {
  const uint32_t stride = gridDim.x * 256;
  uint32_t p = blockIdx.x * 256 + threadIdx.x;
  if (p >= total) return;
  uint32_t row = p / ppr;
  uint4 x = ld_o<kStream>(a.oa + p), y = ld_o<kStream>(a.ob + p);
  float la = __ldg(a.lsea + row), lb = __ldg(a.lseb + row);
  while (true) {
    const uint32_t np = p + stride;
    const bool more = np < total;
    uint4 nx = make_uint4(0, 0, 0, 0), ny = nx;
    float nla = 0.f, nlb = 0.f;
    uint32_t nrow = 0;
    if (more) {
      nrow = np / ppr;
      nx = ld_o<kStream>(a.oa + np), ny = ld_o<kStream>(a.ob + np);
      nla = __ldg(a.lsea + nrow), nlb = __ldg(a.lseb + nrow);
    }
    const Weights w = weights2(la, lb);
    st_o<kStream>(a.out + p, combine(x, y, w.wa, w.wb));
    if (p == row * ppr) st_lse<kStream>(a.lse_out + row, w.lse);
    if (!more) break;
    p = np, row = nrow, x = nx, y = ny, la = nla, lb = nlb;
  }
}

// ------------------------------------------------------ variant 5: kJ pieces a state, high ILP
// Each thread kJ = 2 pieces of each state (32 B a state, 64 B in flight), pieces 256 apart so
// every warp load is 512 contiguous bytes; (256, 4) bounds keep >= 1024 threads an SM. Tests
// whether more bytes a thread (vs variant 2's 32 B) at still-high occupancy pays.
template <int kJ, int kMinBlocks>
__global__ void __launch_bounds__(256, kMinBlocks)
    flat_pieces(Args a, uint32_t total, uint32_t ppr) {
  const uint32_t base = blockIdx.x * (256 * kJ) + threadIdx.x;
  uint4 x[kJ], y[kJ];
  float la[kJ], lb[kJ];
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const uint32_t p = base + j * 256, row = p / ppr;
    if (p < total) {
      x[j] = __ldg(a.oa + p), y[j] = __ldg(a.ob + p);
      la[j] = __ldg(a.lsea + row), lb[j] = __ldg(a.lseb + row);
    }
  }
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const uint32_t p = base + j * 256, row = p / ppr;
    if (p < total) {
      const Weights w = weights2(la[j], lb[j]);
      a.out[p] = combine(x[j], y[j], w.wa, w.wb);
      if (p == row * ppr) a.lse_out[row] = w.lse;
    }
  }
}

// ----------------------------------------------------- variant 8: warp tile, lse by shuffle
// Added: in variants 2-5 half the load instructions are the 4-byte lse loads (16 lanes, same
// address) and every thread repeats the expf / logf math of its row. Here a warp owns 32 rows:
// lane l loads row l's lse (one coalesced 128 B request per state), computes its weights once,
// stores lse_out coalesced; then the warp streams the tile's 32 * ppr pieces, 4 pieces a state
// in flight a lane, weights fetched by __shfl_sync. Needs ppr a power of two <= 32.
__global__ void __launch_bounds__(256) warp_tile(Args a, uint32_t rows, uint32_t ppr_shift) {
  const uint32_t lane = threadIdx.x & 31;
  const uint32_t row0 = ((blockIdx.x * 256 + threadIdx.x) >> 5) * 32;
  if (row0 >= rows) return;  // whole warp
  const uint32_t my = row0 + lane, total = rows << ppr_shift, pbase = row0 << ppr_shift;
  float la = -INFINITY, lb = -INFINITY;
  if (my < rows) la = __ldg(a.lsea + my), lb = __ldg(a.lseb + my);
  const Weights w = weights2(la, lb);
  if (my < rows) a.lse_out[my] = w.lse;
  const uint32_t iters = 1u << ppr_shift;  // 32 * ppr pieces / 32 lanes
  for (uint32_t it0 = 0; it0 < iters; it0 += 4) {
    uint4 x[4], y[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t p = pbase + (it0 + u) * 32 + lane;
      if (it0 + u < iters && p < total) x[u] = __ldg(a.oa + p), y[u] = __ldg(a.ob + p);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (it0 + u >= iters) break;  // warp-uniform
      const uint32_t q = (it0 + u) * 32 + lane, r = q >> ppr_shift;
      const float wa = __shfl_sync(0xffffffffu, w.wa, r), wb = __shfl_sync(0xffffffffu, w.wb, r);
      if (pbase + q < total) a.out[pbase + q] = combine(x[u], y[u], wa, wb);
    }
  }
}

// ====================================================================================== host
namespace {

uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float bf2f(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
// One bf16 ulp at |x| (2^(e - 7) for x in [2^e, 2^(e+1))).
double bf16_ulp(double x) {
  int e;
  std::frexp(std::fabs(x), &e);  // |x| = m 2^e, m in [0.5, 1)
  return x == 0.0 ? 0.0 : std::ldexp(1.0, e - 1 - 7);
}
uint64_t g_rng = 0x243f6a8885a308d3ull;
uint64_t next_u64() {  // splitmix64
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double uniform() { return (next_u64() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)

struct Variant {
  int id;
  std::string name;
  const void* func;  // for registers / occupancy
  int block;         // threads a CTA
  bool usable;
  std::function<void(cudaStream_t)> launch;
  double bytes;
  // results
  float us = 0.f;
  std::string check = "-";
};

}  // namespace

int main(int argc, char** argv) {
  const int T = argc > 1 ? atoi(argv[1]) : 16384, H = argc > 2 ? atoi(argv[2]) : 32,
            D = argc > 3 ? atoi(argv[3]) : 128;
  if (T <= 0 || H <= 0 || D <= 0 || D % 8 != 0) {
    fprintf(stderr, "need tokens, heads > 0 and dim a multiple of 8\n");
    return 1;
  }
  const uint64_t rows = uint64_t(T) * H, elts = rows * D, ppr = D / 8, pieces = rows * ppr;
  if (pieces >= (1ull << 31)) {
    fprintf(stderr, "shape too large for the 32-bit index math of the variants\n");
    return 1;
  }
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("device %s, %d SMs, L2 %d MB; T=%d H=%d D=%d bf16, two states\n", prop.name, sms,
         prop.l2CacheSize >> 20, T, H, D);

  // ---- inputs: o uniform [-1, 1); lse uniform [-5, 5], 5% -inf each; empty states' o = NaN.
  std::vector<uint16_t> ha(elts), hb(elts);
  std::vector<float> hla(rows), hlb(rows);
  for (uint64_t i = 0; i < elts; ++i) ha[i] = f2bf(float(2 * uniform() - 1));
  for (uint64_t i = 0; i < elts; ++i) hb[i] = f2bf(float(2 * uniform() - 1));
  for (uint64_t r = 0; r < rows; ++r) {
    hla[r] = uniform() < 0.05 ? -INFINITY : float(10 * uniform() - 5);
    hlb[r] = uniform() < 0.05 ? -INFINITY : float(10 * uniform() - 5);
  }
  for (uint64_t r = 0; r < std::min<uint64_t>(rows, 3); ++r) hla[r] = hlb[r] = -INFINITY;
  for (uint64_t r = rows - 1; r > rows - 3 && r >= 3; --r) hla[r] = hlb[r] = -INFINITY;
  if (rows > 8) hla[5] = NAN, hla[6] = NAN, hlb[6] = -INFINITY, hlb[7] = NAN;  // NaN rows
  for (uint64_t r = 0; r < rows; ++r) {
    if (hla[r] == -INFINITY) std::fill(&ha[r * D], &ha[r * D] + D, uint16_t(0x7fc0));
    if (hlb[r] == -INFINITY) std::fill(&hb[r * D], &hb[r * D] + D, uint16_t(0x7fc0));
  }
  // ---- CPU reference (double)
  std::vector<float> ref(elts), ref_lse(rows);
  for (uint64_t r = 0; r < rows; ++r) {
    const double la = hla[r], lb = hlb[r];
    if (std::isnan(la) || std::isnan(lb)) {
      ref_lse[r] = NAN;
      std::fill(&ref[r * D], &ref[r * D] + D, NAN);
      continue;
    }
    const double m = std::max(la, lb);
    if (m == -INFINITY) {
      ref_lse[r] = -INFINITY;
      std::fill(&ref[r * D], &ref[r * D] + D, 0.f);
      continue;
    }
    const double wa = la == -INFINITY ? 0 : std::exp(la - m),
                 wb = lb == -INFINITY ? 0 : std::exp(lb - m);
    ref_lse[r] = float(m + std::log(wa + wb));
    for (int d = 0; d < D; ++d) {
      const uint64_t i = r * D + d;
      const double s = (wa ? wa * bf2f(ha[i]) : 0.0) + (wb ? wb * bf2f(hb[i]) : 0.0);
      ref[i] = float(s / (wa + wb));
    }
  }

  // ---- device buffers
  void *d_a, *d_b, *d_out, *d_flush;
  float *d_la, *d_lb, *d_lse;
  const size_t o_bytes = elts * 2, l_bytes = rows * 4, flush_bytes = size_t(200) << 20;
  CK(cudaMalloc(&d_a, o_bytes));
  CK(cudaMalloc(&d_b, o_bytes));
  CK(cudaMalloc(&d_out, o_bytes));
  CK(cudaMalloc(&d_la, l_bytes));
  CK(cudaMalloc(&d_lb, l_bytes));
  CK(cudaMalloc(&d_lse, l_bytes));
  CK(cudaMalloc(&d_flush, flush_bytes));
  CK(cudaMemcpy(d_a, ha.data(), o_bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_b, hb.data(), o_bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_la, hla.data(), l_bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_lb, hlb.data(), l_bytes, cudaMemcpyHostToDevice));
  const Args args{static_cast<const uint4*>(d_a),
                  static_cast<const uint4*>(d_b),
                  d_la,
                  d_lb,
                  static_cast<uint4*>(d_out),
                  d_lse};

  cur::Params cp{};
  for (int s = 0; s < 2; ++s) {
    cp.src[s].o = s == 0 ? d_a : d_b;
    cp.src[s].lse = s == 0 ? d_la : d_lb;
    cp.src[s].o_stride[0] = int64_t(H) * D, cp.src[s].o_stride[2] = D;
    cp.src[s].lse_stride[0] = H, cp.src[s].lse_stride[2] = 1;
    cp.src[s].n = 1;
  }
  cp.num_sources = 2, cp.tokens = T, cp.heads = H, cp.dim = D;
  cp.out = d_out, cp.out_stride[0] = int64_t(H) * D, cp.out_stride[1] = D;
  cp.lse = d_lse, cp.lse_stride[0] = H, cp.lse_stride[1] = 1;

  auto occupancy = [&](const void* f, int block) {
    int n = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, 0));
    return n;
  };
  const double merge_bytes = 3.0 * elts * 2 + 3.0 * rows * 4, copy_bytes = 3.0 * elts * 2;
  const uint32_t total = uint32_t(pieces), ppr32 = uint32_t(ppr);
  const unsigned cur_blocks = unsigned((rows * (ppr / 4) + 255) / 256);
  const unsigned bdy = unsigned(std::min<uint64_t>(H, 1024 / std::max<uint64_t>(ppr, 1)));
  const bool pow2 = (ppr & (ppr - 1)) == 0 && ppr <= 32;
  int shift = 0;
  while ((1ull << shift) < ppr) ++shift;

  std::vector<Variant> vs;
  auto persistent = [&](const void* f) { return unsigned(sms * std::max(1, occupancy(f, 256))); };
  {
    const void* f = (const void*)copy_ceiling;
    const unsigned g = persistent(f);
    vs.push_back({0, "copy ceiling (o_a+o_b)", f, 256, true,
                  [=](cudaStream_t s) { copy_ceiling<<<g, 256, 0, s>>>(args, total); },
                  copy_bytes});
  }
  vs.push_back(
      {1, "current merge_vec kP=4", (const void*)cur::merge_vec_kernel<4, false>, 256, ppr % 4 == 0,
       [=](cudaStream_t s) { cur::merge_vec_kernel<4, false><<<cur_blocks, 256, 0, s>>>(cp); },
       merge_bytes});
  vs.push_back(
      {2, "block per token", (const void*)block_per_token<false>, int(ppr * bdy), ppr <= 1024,
       [=](cudaStream_t s) {
         block_per_token<false><<<dim3(T, (H + bdy - 1) / bdy), dim3(ppr32, bdy), 0, s>>>(args, H);
       },
       merge_bytes});
  {
    const void* f = (const void*)grid_stride_pipelined<false>;
    const unsigned g = persistent(f);
    vs.push_back({3, "grid-stride pipelined", f, 256, true,
                  [=](cudaStream_t s) {
                    grid_stride_pipelined<false><<<g, 256, 0, s>>>(args, total, ppr32);
                  },
                  merge_bytes});
  }
  vs.push_back({4, "block per token + .nc/.cs", (const void*)block_per_token<true>, int(ppr * bdy),
                ppr <= 1024,
                [=](cudaStream_t s) {
                  block_per_token<true>
                      <<<dim3(T, (H + bdy - 1) / bdy), dim3(ppr32, bdy), 0, s>>>(args, H);
                },
                merge_bytes});
  vs.push_back({5, "2 pieces/state, LB(256,4)", (const void*)flat_pieces<2, 4>, 256, true,
                [=](cudaStream_t s) {
                  flat_pieces<2, 4><<<(total + 511) / 512, 256, 0, s>>>(args, total, ppr32);
                },
                merge_bytes});
  vs.push_back(
      {6, "current, interleaved pieces", (const void*)cur::merge_vec_kernel<4, true>, 256,
       ppr % 4 == 0,
       [=](cudaStream_t s) { cur::merge_vec_kernel<4, true><<<cur_blocks, 256, 0, s>>>(cp); },
       merge_bytes});
  {
    const void* f = (const void*)grid_stride_pipelined<true>;
    const unsigned g = persistent(f);
    vs.push_back(
        {7, "grid-stride pipelined + .nc/.cs", f, 256, true,
         [=](cudaStream_t s) { grid_stride_pipelined<true><<<g, 256, 0, s>>>(args, total, ppr32); },
         merge_bytes});
  }
  vs.push_back({8, "warp tile, lse by shuffle", (const void*)warp_tile, 256, pow2,
                [=](cudaStream_t s) {
                  const unsigned blocks = unsigned((rows + 255) / 256);  // 8 warps x 32 rows
                  warp_tile<<<blocks, 256, 0, s>>>(args, uint32_t(rows), uint32_t(shift));
                },
                merge_bytes});
  // 9 (added): hopattn's own kP = 1 path (launch.cu takes it when D / 8 is not a multiple of 4):
  // 40 registers, 6 CTAs an SM, one piece a thread. With 6 it separates occupancy from the piece
  // layout as the cause of variant 1's speed.
  vs.push_back(
      {9, "current merge_vec kP=1", (const void*)cur::merge_vec_kernel<1, false>, 256, true,
       [=](cudaStream_t s) {
         cur::merge_vec_kernel<1, false><<<unsigned((pieces + 255) / 256), 256, 0, s>>>(cp);
       },
       merge_bytes});
  // 10, 11 (added): 1 and 9 with 32-bit divisions: is the index arithmetic what holds them back?
  vs.push_back({10, "current kP=4, 32-bit divisions",
                (const void*)cur::merge_vec_kernel<4, false, true>, 256, ppr % 4 == 0,
                [=](cudaStream_t s) {
                  cur::merge_vec_kernel<4, false, true><<<cur_blocks, 256, 0, s>>>(cp);
                },
                merge_bytes});
  vs.push_back({11, "current kP=1, 32-bit divisions",
                (const void*)cur::merge_vec_kernel<1, false, true>, 256, true,
                [=](cudaStream_t s) {
                  cur::merge_vec_kernel<1, false, true>
                      <<<unsigned((pieces + 255) / 256), 256, 0, s>>>(cp);
                },
                merge_bytes});
  // 12, 13 (added): 1 and 9 with n = 2 at compile time, each lse loaded once (see kTwo).
  vs.push_back({12, "current kP=4, n=2 fixed, lse once",
                (const void*)cur::merge_vec_kernel<4, false, false, true>, 256, ppr % 4 == 0,
                [=](cudaStream_t s) {
                  cur::merge_vec_kernel<4, false, false, true><<<cur_blocks, 256, 0, s>>>(cp);
                },
                merge_bytes});
  vs.push_back({13, "current kP=1, n=2 fixed, lse once",
                (const void*)cur::merge_vec_kernel<1, false, false, true>, 256, true,
                [=](cudaStream_t s) {
                  cur::merge_vec_kernel<1, false, false, true>
                      <<<unsigned((pieces + 255) / 256), 256, 0, s>>>(cp);
                },
                merge_bytes});

  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<uint16_t> got(elts);
  std::vector<float> got_lse(rows);

  for (Variant& v : vs) {
    if (!v.usable) {
      v.check = "SKIP";
      continue;
    }
    // ---- correctness: poison the outputs, run once, compare every element
    CK(cudaMemset(d_out, 0xff, o_bytes));
    CK(cudaMemset(d_lse, 0xff, l_bytes));
    v.launch(stream);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(stream));
    if (v.id != 0) {
      CK(cudaMemcpy(got.data(), d_out, o_bytes, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(got_lse.data(), d_lse, l_bytes, cudaMemcpyDeviceToHost));
      uint64_t bad = 0, first_bad = 0;
      double worst = 0;
      auto same = [](double g, double r, double tol) {
        if (std::isnan(r)) return std::isnan(g);
        if (std::isinf(r)) return g == r;
        return std::fabs(g - r) <= tol;  // false for NaN / inf g
      };
      for (uint64_t i = 0; i < elts; ++i) {
        const double g = bf2f(got[i]), r = ref[i];
        if (std::isfinite(r) && std::isfinite(g)) worst = std::max(worst, std::fabs(g - r));
        if (!same(g, r, bf16_ulp(r) + 1e-6) && bad++ == 0) first_bad = i;
      }
      for (uint64_t r = 0; r < rows; ++r) {
        if (!same(got_lse[r], ref_lse[r], 1e-5 * (1 + std::fabs(ref_lse[r]))) && bad++ == 0)
          first_bad = elts + r;
      }
      char buf[160];
      if (bad == 0) {
        snprintf(buf, sizeof buf, "PASS");
      } else if (first_bad < elts) {
        snprintf(buf, sizeof buf, "FAIL (%llu bad; out[%llu] = %g, want %g)",
                 (unsigned long long)bad, (unsigned long long)first_bad, bf2f(got[first_bad]),
                 ref[first_bad]);
      } else {
        const uint64_t r = first_bad - elts;
        snprintf(buf, sizeof buf, "FAIL (%llu bad; lse[%llu] = %g, want %g)",
                 (unsigned long long)bad, (unsigned long long)r, got_lse[r], ref_lse[r]);
      }
      v.check = buf;
      printf("variant %d %-32s %s (max |err| on finite outputs %.3g)\n", v.id, v.name.c_str(),
             v.check.c_str(), worst);
    }
    // ---- timing
    for (int i = 0; i < 5; ++i) v.launch(stream);
    CK(cudaGetLastError());
    std::vector<float> ms;
    for (int i = 0; i < 20; ++i) {
      CK(cudaMemsetAsync(d_flush, i & 0xff, flush_bytes, stream));
      CK(cudaEventRecord(e0, stream));
      v.launch(stream);
      CK(cudaEventRecord(e1, stream));
      CK(cudaGetLastError());
      CK(cudaEventSynchronize(e1));
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    v.us = 500.f * (ms[9] + ms[10]);
  }

  auto tbps = [](const Variant& v) { return v.us > 0 ? v.bytes / (v.us * 1e-6) / 1e12 : 0.0; };
  const double t0 = tbps(vs[0]), t1 = tbps(vs[1]);
  printf("\nmerge bytes %.1f MB (copy ceiling %.1f MB); median of 20, L2 flushed before each\n",
         merge_bytes / 1e6, copy_bytes / 1e6);
  printf("| # | variant | us | TB/s | /copy | /cur | regs | local B | CTAs/SM | check |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Variant& v : vs) {
    cudaFuncAttributes at;
    CK(cudaFuncGetAttributes(&at, v.func));
    const int occ = v.block <= 1024 ? occupancy(v.func, v.block) : 0;
    if (v.us == 0) {
      printf("| %d | %s | - | - | - | - | %d | %zu | %d | %s |\n", v.id, v.name.c_str(), at.numRegs,
             at.localSizeBytes, occ, v.check.c_str());
      continue;
    }
    const double tb = tbps(v);
    printf("| %d | %s | %.1f | %.2f | %.2f | %.2f | %d | %zu | %d | %s |\n", v.id, v.name.c_str(),
           v.us, tb, t0 > 0 ? tb / t0 : 0.0, t1 > 0 ? tb / t1 : 0.0, at.numRegs, at.localSizeBytes,
           occ, v.check.c_str());
  }
  bool ok = true;
  for (const Variant& v : vs) ok = ok && v.check.rfind("FAIL", 0) != 0;
  CK(cudaFree(d_a));
  CK(cudaFree(d_b));
  CK(cudaFree(d_out));
  CK(cudaFree(d_la));
  CK(cudaFree(d_lb));
  CK(cudaFree(d_lse));
  CK(cudaFree(d_flush));
  return ok ? 0 : 2;
}
