// What running code once costs an SM: cycles for N KB of straight-line FMAs executed a single
// time per CTA (every instruction fetched cold), against the same instruction count from a small
// loop body (fetched once, then warm). A question behind the ~10-20 us fixed cost of a one-tile
// decode or mla CTA (docs/perf/NOTES.md): the mla kernel's path is ~55 KB of SASS, the seesaw
// kernel's ~120 KB, most of it straight-line and run once per CTA.
//
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o icache_probe tools/icache_probe.cu
//   ./icache_probe          one line per (code size, threads, launch): median cycles a CTA
//
// Each CTA times its own body with clock64 (thread 0 of warp 0 and of the last warp), so launch
// latency is not in the numbers. Launches: "cold" after a 256 MB write (L2 holds none of the
// code), "L2" right after that (code in L2, not in the SM's instruction caches: another kernel
// ran in between), "again" the same kernel twice in a row (the second launch's SMs ran this code
// last).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"

namespace {

constexpr int kChains = 8;  // independent FMA chains a thread: one instruction a cycle when warm

// The chains' start values, then a barrier: every warp of the CTA starts its timed body together.
__device__ __forceinline__ void start_chains(float (&a)[kChains]) {
#pragma unroll
  for (int c = 0; c < kChains; ++c) a[c] = threadIdx.x * 0.001f + c;
  __syncthreads();
}

// Rep i: one FMA on every chain.
__device__ __forceinline__ void rep(float (&a)[kChains], int i) {
#pragma unroll
  for (int c = 0; c < kChains; ++c) a[c] = fmaf(a[c], 1.0001f, 0.25f * (i % 7 + c));
}

// The chains' sum to `out` (so that no FMA is dead) and each warp's cycles to `cycles`.
__device__ __forceinline__ void report(const float (&a)[kChains], long long elapsed, float* out,
                                       long long* cycles) {
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += a[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x % 32 == 0) cycles[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = elapsed;
}

// kReps x kChains FMAs (16 bytes of SASS each) in one straight line.
template <int kReps>
__global__ void straight(float* out, long long* cycles) {
  float a[kChains];
  start_chains(a);
  const long long t0 = clock64();
#pragma unroll
  for (int i = 0; i < kReps; ++i) rep(a, i);
  report(a, clock64() - t0, out, cycles);
}

// The same FMA count from a loop of 8 unrolled reps (a ~1 KB body).
__global__ void looped(float* out, long long* cycles, int reps) {
  float a[kChains];
  start_chains(a);
  const long long t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < reps; i += 8) {
#pragma unroll
    for (int j = 0; j < 8; ++j) rep(a, j);
  }
  report(a, clock64() - t0, out, cycles);
}

struct Probe {
  int sms;
  float* out;
  long long* cycles;
  char* flush;
  size_t flush_bytes = size_t{256} << 20;

  void evict_l2() { CK(cudaMemset(flush, 1, flush_bytes)); }

  // Median over the CTAs' warps of the last launch.
  long long median(int threads) {
    CK(cudaDeviceSynchronize());
    const int n = sms * threads / 32;
    std::vector<long long> h(n);
    CK(cudaMemcpy(h.data(), cycles, n * sizeof(long long), cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    return h[n / 2];
  }

  template <int kReps>
  void row(int threads) {
    const int kb = kReps * kChains * 16 / 1024;
    auto launch = [&] {
      straight<kReps><<<sms, threads>>>(out, cycles);
      CK(cudaGetLastError());
    };
    evict_l2();
    launch();
    const long long cold = median(threads);
    evict_l2();
    CK(cudaDeviceSynchronize());
    CK(cudaMemset(flush, 2, 4096));  // another kernel-free op; code stays in L2
    launch();
    const long long l2 = median(threads);
    launch();
    launch();
    const long long again = median(threads);
    looped<<<sms, threads>>>(out, cycles, kReps);
    CK(cudaGetLastError());
    looped<<<sms, threads>>>(out, cycles, kReps);
    const long long warm = median(threads);
    std::printf(
        "%4d KB  %4d threads  cold %8lld  l2 %8lld  again %8lld  loop %8lld  cycles"
        "  (cold - loop) per KB %7.1f\n",
        kb, threads, cold, l2, again, warm, (cold - warm) / static_cast<double>(kb));
  }
};

}  // namespace

int main() {
  Probe p{};
  CK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaMalloc(&p.out, static_cast<size_t>(p.sms) * 512 * sizeof(float)));
  CK(cudaMalloc(&p.cycles, static_cast<size_t>(p.sms) * 16 * sizeof(long long)));
  CK(cudaMalloc(&p.flush, p.flush_bytes));
  std::printf("icache_probe: %d SMs, one CTA each; cycles of a warp's timed body (median)\n",
              p.sms);
  for (int threads : {128, 384}) {
    p.row<64>(threads);   // 8 KB
    p.row<256>(threads);  // 32 KB
    p.row<512>(threads);  // 64 KB
    p.row<768>(threads);  // 96 KB
  }
  return 0;
}
