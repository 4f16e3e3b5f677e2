// The library's merge_few_kernel (src/kernels/merge/kernel.cuh) over its shapes: 16-byte pieces a
// thread x state slots x blocks an SM x rounds (kStates / rounds states' o in flight at once) x
// sources (1: merge_states_n, 2: merge_states' form, its state addresses picked per source), on
// merge_peers.py's rows and 8 / 12 / 16 states of 16384 x 32 x 128 (bf16 in and out), to pick the
// shape launch.cu takes for each state count. Each row times the slot count launch.cu takes for
// it, and rows past 8 states also merge_vec_kernel (what ran them before merge_few_kernel had 16
// slots). Every variant runs the same arithmetic, so every output (o and lse) must equal the row's
// first variant bit for bit (checked; the GPU tests compare the library's choice with the CPU
// reference).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc \
//        -Xptxas -v -o /tmp/merge_few_sweep tools/merge_few_sweep.cu   (from the repository root)
//   /tmp/merge_few_sweep
// Per row and variant: the median of 30 launches, each after a 256 MB memset that flushes L2,
// CUDA events around the kernel only; TB/s of the bytes a merge must move (every state's o and
// lse read once, out and lse written once); the last line of a row names its fastest variant.
// Exits 1 on a CUDA error, 2 on a mismatch. Variants that spill (ptxas -v: 1 x 16 x 4 in 2
// rounds, 2 x 16 x 3 or 4 in 4, 2 x 8 x 4 in 2, 1 x 8 x 6 in 2) are left out.
// H200, 2026-12-03 (docs/perf/NOTES.md, merge; the kernel before SourceRows, the one-source form
// and the exponentials kept for the weights, 8 slots at most): two states 2 x 2 x 4 fastest (16384
// x 32 x 128: 100.2 us, 4.08 TB/s; 4 x 2 x 2, the shape before, 104.3; 1 x 2 x 8 124.1); four
// states 2 x 4 x 2 (47.2 us at 4096 x 32 x 128); eight 1 x 8 x 4 (86.9 us; 1 x 8 x 2 97.4). The
// 16-slot, rounds and sources variants: not yet measured on the GPU.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.cuh"
#include "kernels/merge/kernel.cuh"

namespace m = hopattn::kernels::merge;
using bf16 = __nv_bfloat16;

namespace {

struct Row {
  int tokens, heads, dim, states;
};

using Launch = void (*)(const m::Params&, cudaStream_t);

unsigned blocks_for(const m::Params& p, int pieces) {
  const int64_t threads = int64_t(p.tokens) * p.heads * (p.dim / 8 / pieces);
  return static_cast<unsigned>((threads + m::kVecThreads - 1) / m::kVecThreads);
}

template <int kP, int kSlots, int kBlocks, int kRounds, int kSources>
void launch_few(const m::Params& p, cudaStream_t s) {
  m::merge_few_kernel<bf16, bf16, kP, kSlots, kSources, kBlocks, kRounds>
      <<<blocks_for(p, kP), m::kVecThreads, 0, s>>>(p);
}

void launch_vec(const m::Params& p, cudaStream_t s) {
  m::merge_vec_kernel<bf16, bf16, 4><<<blocks_for(p, 4), m::kVecThreads, 0, s>>>(p);
}

struct Variant {
  int pieces, slots, blocks, rounds, sources;  // slots 0: merge_vec_kernel, 4 pieces
  Launch fn;
};

template <int kP, int kSlots, int kBlocks, int kRounds = 1, int kSources = 1>
constexpr Variant few() {
  constexpr Launch fn = launch_few<kP, kSlots, kBlocks, kRounds, kSources>;
  return {kP, kSlots, kBlocks, kRounds, kSources, fn};
}

// Shapes worth timing for each slot count; the first of a slot count is the row's reference.
// clang-format off
const Variant kVariants[] = {
    few<2, 2, 4>(), few<2, 2, 4, 1, 2>(), few<4, 2, 2>(), few<1, 2, 8>(), few<1, 2, 6>(),
    few<2, 2, 3>(),
    few<2, 4, 2>(), few<1, 4, 4>(), few<1, 4, 6>(),
    few<1, 8, 4>(), few<1, 8, 4, 1, 2>(), few<1, 8, 2>(), few<1, 8, 3>(), few<2, 8, 2>(),
    few<2, 8, 3, 2>(),
    {4, 0, 0, 0, 1, launch_vec}, few<1, 16, 3, 2>(), few<1, 16, 2>(), few<1, 16, 4, 4>(),
    few<2, 16, 2, 2>(),
};
// clang-format on

// launch.cu's slot count for n states (the fewest that hold n).
int slots_for(int n) { return n <= 2 ? 2 : (n <= 4 ? 4 : (n <= 8 ? 8 : 16)); }

// Whether v has the pieces, blocks and rounds launch.cu takes for its slot count (traits.cuh).
template <int kS>
bool library_shape_of(const Variant& v) {
  return v.pieces == m::kFewPieces<kS> && v.blocks == m::kFewBlocksPerSm<kS> &&
         v.rounds == m::kFewRounds<kS>;
}
bool library_shape(const Variant& v) {
  return (v.slots == 2 && library_shape_of<2>(v)) || (v.slots == 4 && library_shape_of<4>(v)) ||
         (v.slots == 8 && library_shape_of<8>(v)) || (v.slots == 16 && library_shape_of<16>(v));
}

// Deterministic inputs, made on the device (the 16-state rows hold 2 GB of o): o uniform in
// [-1, 1], lse uniform in [-5, 5) with ~1/17 empty states and ~1/4099 NaN.
__device__ uint32_t mix(uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return static_cast<uint32_t>(x >> 32);
}

__global__ void fill(bf16* o, int64_t n_o, float* lse, int64_t n_lse) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_o;
       i += int64_t(gridDim.x) * blockDim.x) {
    o[i] = __float2bfloat16(float(mix(i) % 2001) / 1000.f - 1.f);
    if (i < n_lse) {
      const uint32_t r = mix(i + (1ull << 40));
      lse[i] = r % 4099 == 0 ? NAN : (r % 17 == 0 ? -INFINITY : float(r % 1000) / 100.f - 5.f);
    }
  }
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const Row rows[] = {{16384, 32, 128, 2},  {4096, 32, 128, 2},   {16384, 8, 512, 2},
                      {4096, 32, 128, 4},   {4096, 32, 128, 8},   {16384, 32, 128, 8},
                      {16384, 32, 128, 16}, {16384, 32, 128, 12}, {1024, 32, 128, 16}};
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const size_t flush_bytes = size_t(256) << 20;
  void* flush;
  CK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int bad = 0;
  printf(
      "| tokens x heads x dim | states | pieces x slots x blocks/SM, rounds, sources | us | TB/s"
      " | check |\n");
  printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Row& r : rows) {
    const int64_t row_elts = int64_t(r.tokens) * r.heads * r.dim;
    const int64_t rows_n = int64_t(r.tokens) * r.heads;
    // o [T, n, H, D], lse [T, n, H]: one source of n states (merge_states_n's layout).
    const int64_t n_o = row_elts * r.states, n_lse = rows_n * r.states;
    bf16 *o, *out;
    float *lse, *lse_out;
    CK(cudaMalloc(&o, n_o * sizeof(bf16)));
    CK(cudaMalloc(&lse, n_lse * sizeof(float)));
    CK(cudaMalloc(&out, row_elts * sizeof(bf16)));
    CK(cudaMalloc(&lse_out, rows_n * sizeof(float)));
    fill<<<132 * 8, 256, 0, s>>>(o, n_o, lse, n_lse);
    CK(cudaGetLastError());
    m::Params p{};
    p.src[0].o = o;
    p.src[0].o_stride[0] = int64_t(r.states) * r.heads * r.dim;
    p.src[0].o_stride[1] = int64_t(r.heads) * r.dim;
    p.src[0].o_stride[2] = r.dim;
    p.src[0].lse = lse;
    p.src[0].lse_stride[0] = int64_t(r.states) * r.heads;
    p.src[0].lse_stride[1] = r.heads;
    p.src[0].lse_stride[2] = 1;
    p.src[0].n = r.states;
    p.num_sources = 1;
    p.tokens = r.tokens;
    p.heads = r.heads;
    p.dim = r.dim;
    p.out = out;
    p.out_stride[0] = int64_t(r.heads) * r.dim;
    p.out_stride[1] = r.dim;
    p.lse = lse_out;
    p.lse_stride[0] = r.heads;
    p.lse_stride[1] = 1;
    const double bytes =
        double(row_elts) * 2 * (r.states + 1) + double(rows_n) * 4 * (r.states + 1);
    std::vector<bf16> first, got(static_cast<size_t>(row_elts));
    std::vector<float> first_lse, got_lse(static_cast<size_t>(rows_n));
    double best_us = INFINITY;
    const Variant* best = nullptr;
    for (const Variant& v : kVariants) {
      const bool vec = v.slots == 0;
      if (vec ? r.states <= 8 : v.slots != slots_for(r.states)) continue;
      if ((r.dim / 8) % v.pieces != 0) continue;
      CK(cudaMemsetAsync(out, 0xff, row_elts * sizeof(bf16), s));
      CK(cudaMemsetAsync(lse_out, 0xff, rows_n * sizeof(float), s));
      v.fn(p, s);
      CK(cudaGetLastError());
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(got.data(), out, got.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(got_lse.data(), lse_out, got_lse.size() * sizeof(float),
                    cudaMemcpyDeviceToHost));
      const char* check = "same";
      if (first.empty()) {
        first = got;
        first_lse = got_lse;
        check = "first";
      } else if (memcmp(first.data(), got.data(), got.size() * sizeof(bf16)) != 0 ||
                 memcmp(first_lse.data(), got_lse.data(), got_lse.size() * sizeof(float)) != 0) {
        check = "MISMATCH";
        bad = 1;
      }
      std::vector<float> ms;
      for (int i = 0; i < 33; ++i) {
        CK(cudaMemsetAsync(flush, i, flush_bytes, s));
        CK(cudaEventRecord(e0, s));
        v.fn(p, s);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (i >= 3) ms.push_back(t);
      }
      const double us = median(ms) * 1e3;
      if (us < best_us) best_us = us, best = &v;
      char shape[96];
      if (vec) {
        snprintf(shape, sizeof shape, "merge_vec_kernel, 4 pieces (before)");
      } else {
        snprintf(
            shape, sizeof shape, "%d x %d x %d, %d, %d%s", v.pieces, v.slots, v.blocks, v.rounds,
            v.sources,
            library_shape(v) ? (v.sources == 1 ? " (launch.cu)" : " (merge_states' form)") : "");
      }
      printf("| %d x %d x %d | %d | %s | %.1f | %.2f | %s |\n", r.tokens, r.heads, r.dim, r.states,
             shape, us, bytes / us * 1e-6, check);
    }
    if (best != nullptr) {
      printf("fastest for %d x %d x %d, %d states: %d x %d x %d, %d, %d (%.1f us)\n", r.tokens,
             r.heads, r.dim, r.states, best->pieces, best->slots, best->blocks, best->rounds,
             best->sources, best_us);
    }
    CK(cudaFree(o));
    CK(cudaFree(lse));
    CK(cudaFree(out));
    CK(cudaFree(lse_out));
  }
  return bad ? 2 : 0;
}
