// Throughput of back-to-back SS wgmma m64nNk16 (bf16 -> fp32) on one GPU, per SM and clock: the
// question behind the MLA kernel's S = Q K^T tile width (N = 32 keys a block vs 64), and behind a
// decode tile's transposition (S^T = K Q^T: N = 8 or 16 packed rows, groups of 8 k16 steps, the
// 128-deep S of one block at head dim 128, each group waited for before the next).
// Each CTA (one per SM) runs W warpgroups; each issues groups of kSteps accumulating wgmma from
// one 128B-swizzled panel of A (64 rows) and one of B (N rows), commits and waits, kIters times.
// Prints cycles per wgmma (a group's wait included) and FLOP per clock per SM.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude \
//        tools/wgmma_rate.cu -o wgmma_rate && ./wgmma_rate
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "ptx/wgmma.cuh"

namespace {

constexpr int kIters = 256;

// kSteps: k16 steps a group (36: one MLA S tile of 576 columns; 8: a 128-deep S).
template <int N, int W, int kSteps>
__global__ void __launch_bounds__(128 * W, 1) rate_kernel(long long* cycles, float* sink) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  for (int i = threadIdx.x; i < (64 + N) * 128 / 4; i += blockDim.x) {
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u * (i & 1);  // small finite values
  }
  __syncthreads();
  const uint64_t a = hopattn::ptx::make_kmajor_desc(smem);
  const uint64_t b = hopattn::ptx::make_kmajor_desc(smem + 64 * 128);
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
    hopattn::ptx::fence_operands(acc);
    hopattn::ptx::wgmma_fence();
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const uint32_t col = (j % 4) * 32;
      hopattn::ptx::wgmma_ss<N, __nv_bfloat16, 0, 0>(acc, hopattn::ptx::desc_advance(a, col),
                                                     hopattn::ptx::desc_advance(b, col), 1u);
    }
    hopattn::ptx::wgmma_commit_group();
    hopattn::ptx::wgmma_wait_group<0>();
    hopattn::ptx::fence_operands(acc);
  }
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) s += acc[i];
  if (s == 12345.f) sink[threadIdx.x] = s;
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * W + threadIdx.x / 128] = t1 - t0;
}

template <int N, int W, int kSteps = 36>
void measure(int sms) {
  long long* d_cycles;
  float* d_sink;
  cudaMalloc(&d_cycles, sizeof(long long) * sms * W);
  cudaMalloc(&d_sink, sizeof(float) * 1024);
  const int smem = (64 + N) * 128 + 1024;
  cudaFuncSetAttribute(rate_kernel<N, W, kSteps>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       smem);
  for (int rep = 0; rep < 2; ++rep)
    rate_kernel<N, W, kSteps><<<sms, 128 * W, smem>>>(d_cycles, d_sink);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("N=%d W=%d: %s\n", N, W, cudaGetErrorString(err));
    return;
  }
  std::vector<long long> c(sms * W);
  cudaMemcpy(c.data(), d_cycles, sizeof(long long) * c.size(), cudaMemcpyDeviceToHost);
  double mean = 0;
  for (long long v : c) mean += static_cast<double>(v);
  mean /= static_cast<double>(c.size());
  const double per_wgmma = mean / (kIters * kSteps);
  const double flop_per_clk = W * 64.0 * N * 16 * 2 / per_wgmma;
  std::printf(
      "m64n%dk16 SS, %d warpgroup(s) a CTA, groups of %d: %.1f cycles a wgmma per warpgroup,"
      " %.0f FLOP/clk/SM (%.0f%% of 4096)\n",
      N, W, kSteps, per_wgmma, flop_per_clk, 100.0 * flop_per_clk / 4096.0);
  cudaFree(d_cycles);
  cudaFree(d_sink);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  measure<8, 1>(sms);
  measure<8, 2>(sms);
  measure<16, 1>(sms);
  measure<16, 2>(sms);
  measure<8, 1, 8>(sms);
  measure<8, 2, 8>(sms);
  measure<16, 1, 8>(sms);
  measure<16, 2, 8>(sms);
  measure<64, 1, 8>(sms);
  measure<64, 2, 8>(sms);
  measure<128, 1, 8>(sms);
  measure<128, 2, 8>(sms);
  measure<32, 1>(sms);
  measure<32, 2>(sms);
  measure<64, 1>(sms);
  measure<64, 2>(sms);
  measure<128, 1>(sms);
  measure<128, 2>(sms);
  measure<256, 1>(sms);
  return 0;
}
