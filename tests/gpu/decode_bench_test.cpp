// Effective KV bandwidth of the decode kernel over the shapes (batch 1..128, kv_len 1k /
// 8k / 32k, Llama-3-8B 32/8 and Llama-3-70B-per-GPU 64/8 heads, hd 128, pages 16 and 64, bf16
// and fp8 KV). Disabled by default (it is a measurement, not a test); run with
//   hopattn_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*DecodeBandwidth*'
// Each call is timed alone with CUDA events after overwriting a 256 MB buffer, so the KV cache
// comes from HBM. TB/s = K and V bytes the call must read / time. The official comparison with
// peers is `hopattn bench decode`; this is the kernel's own quick number.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "device_buffer.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"
#include "kernels/decode/launch.hpp"

namespace hopattn::testing {
namespace {

struct BenchShape {
  int batch, kv_len, q_heads, kv_heads, page_size;
  DType kv;
};

double time_call(const DecodeArgs& args, const DecodeOptions& opts, DeviceAllocation& flush,
                 int iters) {
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  ::hopattn::decode(args, opts, nullptr);  // warm-up (and first-launch attribute setup)
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    check_cuda(cudaMemsetAsync(flush.data(), i & 0xff, flush.bytes()), "cudaMemsetAsync");
    check_cuda(cudaEventRecord(start), "cudaEventRecord");
    ::hopattn::decode(args, opts, nullptr);
    check_cuda(cudaEventRecord(stop), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check_cuda(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e-3;  // median, seconds
}

TEST(DecodeBandwidth, DISABLED_Table) {
  const std::string why = cuda_device_problem();
  if (!why.empty()) GTEST_SKIP() << why;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const Device dev{DeviceType::kCUDA, device};
  DeviceAllocation flush(256u << 20);
  std::mt19937_64 rng(1);

  std::vector<BenchShape> shapes;
  for (DType kv : {DType::kBF16, DType::kFP8E4M3}) {
    for (int ps : {16, 64}) {
      for (int heads : {32, 64}) {
        for (int kv_len : {1024, 8192, 32768}) {
          for (int batch : {1, 8, 32, 64, 128}) shapes.push_back({batch, kv_len, heads, 8, ps, kv});
        }
      }
    }
  }
  std::printf("%-6s %-5s %-6s %-7s %-5s %-7s %-7s %-10s %-8s\n", "kv", "page", "heads", "kv_len",
              "batch", "splits", "us", "GB read", "TB/s");
  for (const BenchShape& s : shapes) {
    const int64_t D = 128, pages = (s.kv_len + s.page_size - 1) / s.page_size;
    const int64_t num_pages = s.batch * pages;
    const size_t kv_bytes = size_t(num_pages) * s.page_size * s.kv_heads * D * dtype_size(s.kv);
    DeviceAllocation q(size_t(s.batch) * s.q_heads * D * 2), out(q.bytes());
    DeviceAllocation lse(size_t(s.batch) * s.q_heads * 4), k(kv_bytes), v(kv_bytes);
    // Finite, unremarkable values (bf16 0x3c3c ~ 0.0115, e4m3 0x3c = 1.5); timing only.
    check_cuda(cudaMemset(q.data(), 0x3c, q.bytes()), "cudaMemset");
    check_cuda(cudaMemset(k.data(), 0x3c, k.bytes()), "cudaMemset");
    check_cuda(cudaMemset(v.data(), 0x3c, v.bytes()), "cudaMemset");
    std::vector<int32_t> table(num_pages), lens(s.batch, s.kv_len);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    DeviceAllocation table_d(table.size() * 4), lens_d(lens.size() * 4);
    check_cuda(cudaMemcpy(table_d.data(), table.data(), table_d.bytes(), cudaMemcpyHostToDevice),
               "cudaMemcpy");
    check_cuda(cudaMemcpy(lens_d.data(), lens.data(), lens_d.bytes(), cudaMemcpyHostToDevice),
               "cudaMemcpy");

    DecodeArgs a;
    a.q = TensorView(q.data(), DType::kBF16, {s.batch, 1, s.q_heads, D}, dev);
    a.out = TensorView(out.data(), DType::kBF16, {s.batch, 1, s.q_heads, D}, dev);
    a.lse = TensorView(lse.data(), DType::kFP32, {s.batch, 1, s.q_heads}, dev);
    a.k_cache = TensorView(k.data(), s.kv, {num_pages, s.page_size, s.kv_heads, D}, dev);
    a.v_cache = TensorView(v.data(), s.kv, {num_pages, s.page_size, s.kv_heads, D}, dev);
    a.pages.block_table = TensorView(table_d.data(), DType::kInt32, {s.batch, pages}, dev);
    a.pages.kv_lens = TensorView(lens_d.data(), DType::kInt32, {s.batch}, dev);
    DecodeOptions opts;
    const kernels::decode::LaunchPlan plan = kernels::decode::device_plan(a, opts);
    DeviceAllocation ws(plan.workspace_bytes);
    // Zeroed once (the workspace contract), then reused by every call.
    check_cuda(cudaMemset(ws.data(), 0, plan.workspace_bytes > 0 ? plan.workspace_bytes : 16),
               "cudaMemset");
    a.workspace = {plan.workspace_bytes > 0 ? ws.data() : nullptr, plan.workspace_bytes};

    const double t = time_call(a, opts, flush, 10);
    const double read = 2.0 * s.batch * s.kv_len * s.kv_heads * D * dtype_size(s.kv);
    std::printf("%-6s %-5d %-6s %-7d %-5d %-7d %-7.1f %-10.3f %-8.2f\n", dtype_name(s.kv),
                s.page_size, s.q_heads == 32 ? "32/8" : "64/8", s.kv_len, s.batch, plan.num_splits,
                t * 1e6, read * 1e-9, read / t * 1e-12);
  }
}

}  // namespace
}  // namespace hopattn::testing
