// Device ceilings: what this GPU actually delivers, measured the way the benchmarks count.
//   copy   device-to-device cudaMemcpyAsync, (bytes read + bytes written) / time
//   read   a reduction kernel over a multi-GB buffer, bytes read / time
//   write  cudaMemsetAsync over the same buffer, bytes written / time
//   GEMM   8192^3 through cuBLASLt on random data (never zeros: they run faster), TN layout
//          (the only one fp8 takes), bf16 and fp8 e4m3 operands, fp32 accumulation, bf16 out
// Each figure is the median of kIters timed runs (CUDA events) after kWarmup untimed ones.
// Prints a markdown table for docs/perf/NOTES.md. Exit code 1 on any CUDA or cuBLAS error.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "event_median.cuh"

namespace {

constexpr int kWarmup = 3;
constexpr int kIters = 20;
constexpr size_t kBufferBytes = size_t{4} << 30;  // 4 GiB: ~70x the L2
constexpr int kGemmSize = 8192;

void check(cudaError_t s, const char* what) {
  if (s != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(s) + ": " +
                             cudaGetErrorString(s));
  }
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(s)) +
                             " (" + cublasLtGetStatusString(s) + ")");
  }
}

// Median milliseconds of fn() on the default stream.
double median_ms(const std::function<void()>& fn) {
  return hopattn::tools::event_median_ms(fn, kWarmup, kIters);
}

__device__ float hash_to_unit(uint64_t i, uint64_t seed) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull + seed;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
}

template <typename T>
__global__ void fill_random(T* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    p[i] = T(hash_to_unit(i, seed));
  }
}

// Sums the buffer (four independent 16-byte loads in flight per thread) so nothing is dead code.
__global__ void read_all(const float4* __restrict__ p, size_t n, float* sink) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  float acc = 0.f;
  size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const float4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w) + (c.x + c.y + c.z + c.w) +
           (d.x + d.y + d.z + d.w);
  }
  for (; i < n; i += stride) acc += p[i].x + p[i].y + p[i].z + p[i].w;
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (threadIdx.x % 32 == 0) atomicAdd(sink, acc);
}

struct Result {
  std::string name;
  double value;
  const char* unit;
  std::string how;
};

// D = A^T B on cuBLASLt, column-major: A stored K x M, B K x N, D M x N (bf16).
double gemm_tflops(cudaDataType_t ab_type, size_t elt, void* workspace, size_t workspace_bytes) {
  const int64_t M = kGemmSize, N = kGemmSize, K = kGemmSize;
  void *a = nullptr, *b = nullptr, *d = nullptr;
  check(cudaMalloc(&a, M * K * elt), "cudaMalloc A");
  check(cudaMalloc(&b, K * N * elt), "cudaMalloc B");
  check(cudaMalloc(&d, M * N * sizeof(__nv_bfloat16)), "cudaMalloc D");
  const unsigned grid = 4096, block = 256;
  if (ab_type == CUDA_R_8F_E4M3) {
    fill_random<<<grid, block>>>(static_cast<__nv_fp8_e4m3*>(a), M * K, 1);
    fill_random<<<grid, block>>>(static_cast<__nv_fp8_e4m3*>(b), K * N, 2);
  } else {
    fill_random<<<grid, block>>>(static_cast<__nv_bfloat16*>(a), M * K, 1);
    fill_random<<<grid, block>>>(static_cast<__nv_bfloat16*>(b), K * N, 2);
  }
  check(cudaGetLastError(), "fill_random");

  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  cublasLtMatmulDesc_t op;
  check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa),
        "TRANSA");
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb),
        "TRANSB");
  cublasLtMatrixLayout_t la, lb, ld;
  check(cublasLtMatrixLayoutCreate(&la, ab_type, K, M, K), "layout A");
  check(cublasLtMatrixLayoutCreate(&lb, ab_type, K, N, K), "layout B");
  check(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, M, N, M), "layout D");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof workspace_bytes),
        "workspace preference");
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heuristic, &found),
        "AlgoGetHeuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt found no algorithm for this GEMM");
  const float alpha = 1.f, beta = 0.f;
  const double ms = median_ms([&] {
    check(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heuristic.algo,
                         workspace, workspace_bytes, nullptr),
          "cublasLtMatmul");
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  return 2.0 * M * N * K / (ms * 1e-3) * 1e-12;
}

int run() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int clock_khz = 0, mem_clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::printf(
      "Device ceilings, %s: %s, %d SMs, %.1f GiB, L2 %.0f MiB, sm_%d%d, SM clock %d MHz\n\n", date,
      prop.name, prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30),
      prop.l2CacheSize / double(1 << 20), prop.major, prop.minor, clock_khz / 1000);

  std::vector<Result> results;
  char* buffer = nullptr;
  float* sink = nullptr;
  check(cudaMalloc(&buffer, kBufferBytes), "cudaMalloc buffer");
  check(cudaMalloc(&sink, sizeof(float)), "cudaMalloc sink");
  fill_random<<<4096, 256>>>(reinterpret_cast<float*>(buffer), kBufferBytes / 4, 3);
  check(cudaGetLastError(), "fill_random");
  const double gib = kBufferBytes / double(1 << 30);

  const size_t half = kBufferBytes / 2;
  double ms = median_ms([&] {
    check(cudaMemcpyAsync(buffer + half, buffer, half, cudaMemcpyDeviceToDevice),
          "cudaMemcpyAsync");
  });
  results.push_back(
      {"device-to-device copy", 2.0 * half / (ms * 1e-3) * 1e-12, "TB/s",
       "cudaMemcpyAsync of " + std::to_string(half >> 30) + " GiB, (read + written) / time"});

  const int blocks = prop.multiProcessorCount * 8;
  ms = median_ms([&] {
    read_all<<<blocks, 256>>>(reinterpret_cast<const float4*>(buffer), kBufferBytes / 16, sink);
  });
  results.push_back({"read", kBufferBytes / (ms * 1e-3) * 1e-12, "TB/s",
                     "sum of a " + std::to_string(int(gib)) +
                         " GiB buffer, 4 x 16-B loads in flight per thread"});

  ms = median_ms([&] { check(cudaMemsetAsync(buffer, 0, kBufferBytes), "cudaMemsetAsync"); });
  results.push_back({"write", kBufferBytes / (ms * 1e-3) * 1e-12, "TB/s",
                     "cudaMemsetAsync of " + std::to_string(int(gib)) + " GiB"});
  cudaFree(buffer);
  cudaFree(sink);

  const size_t workspace_bytes = size_t{64} << 20;
  void* workspace = nullptr;
  check(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc workspace");
  const std::string shape = std::to_string(kGemmSize) + "^3";
  results.push_back({"bf16 GEMM", gemm_tflops(CUDA_R_16BF, 2, workspace, workspace_bytes),
                     "TFLOP/s", shape + " cuBLASLt TN, fp32 accumulate, bf16 out, random data"});
  results.push_back({"fp8 e4m3 GEMM", gemm_tflops(CUDA_R_8F_E4M3, 1, workspace, workspace_bytes),
                     "TFLOP/s", shape + " cuBLASLt TN, fp32 accumulate, bf16 out, random data"});
  cudaFree(workspace);

  std::printf("| ceiling | measured | how (median of %d after %d warm-up) |\n| --- | --- | --- |\n",
              kIters, kWarmup);
  for (const Result& r : results) {
    std::printf("| %s | %.4g %s | %s |\n", r.name.c_str(), r.value, r.unit, r.how.c_str());
  }
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hopattn_ceilings: %s\n", e.what());
    return 1;
  }
}
