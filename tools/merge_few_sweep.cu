// The library's merge_few_kernel (src/kernels/merge/kernel.cuh) over its shapes: state slots x
// 16-byte pieces a thread x blocks an SM, on merge_peers.py's rows (bf16 in and out), to pick
// the shape launch.cu takes for each state count. Every variant runs the same arithmetic, so
// every output must equal the first variant's bit for bit (checked; the GPU tests compare the
// library's choice with the CPU reference).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc \
//        -Xptxas -v -o /tmp/merge_few_sweep tools/merge_few_sweep.cu   (from the repository root)
//   /tmp/merge_few_sweep
// Per row and variant: the median of 30 launches, each after a 256 MB memset that flushes L2,
// CUDA events around the kernel only; TB/s of the bytes a merge must move (every state's o and
// lse read once, out and lse written once). Exits 1 on a CUDA error, 2 on a mismatch.
// H200, 2026-12-03 (docs/perf/NOTES.md, merge): two states 2 x 2 x 4 fastest (16384 x 32 x 128:
// 100.2 us, 4.08 TB/s; 4 x 2 x 2, the shape before, 104.3; 1 x 2 x 8 124.1); four states 2 x 4
// x 2 (47.2 us at 4096 x 32 x 128); eight 1 x 8 x 4 (86.9 us; 1 x 8 x 2 97.4).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

template <int kP, int kSlots, int kBlocks>
void launch(const m::Params& p, cudaStream_t s) {
  const int64_t rows = int64_t(p.tokens) * p.heads;
  const int64_t threads = rows * (p.dim / 8 / kP);
  const auto blocks = static_cast<unsigned>((threads + m::kVecThreads - 1) / m::kVecThreads);
  m::merge_few_kernel<bf16, bf16, kP, kSlots, kBlocks><<<blocks, m::kVecThreads, 0, s>>>(p);
}

struct Variant {
  int pieces, slots, blocks;
  Launch fn;
};

// Shapes worth timing for each slot count (pieces x slots x blocks an SM).
const Variant kVariants[] = {
    {4, 2, 2, launch<4, 2, 2>}, {2, 2, 4, launch<2, 2, 4>}, {1, 2, 8, launch<1, 2, 8>},
    {1, 2, 6, launch<1, 2, 6>}, {2, 2, 3, launch<2, 2, 3>}, {2, 4, 2, launch<2, 4, 2>},
    {1, 4, 4, launch<1, 4, 4>}, {1, 4, 6, launch<1, 4, 6>}, {1, 8, 2, launch<1, 8, 2>},
    {1, 8, 3, launch<1, 8, 3>}, {1, 8, 4, launch<1, 8, 4>},
};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const Row rows[] = {{16384, 32, 128, 2}, {4096, 32, 128, 2}, {16384, 8, 512, 2},
                      {4096, 32, 128, 4},  {4096, 32, 128, 8}, {16384, 32, 128, 8}};
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const size_t flush_bytes = size_t(256) << 20;
  void* flush;
  CK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int bad = 0;
  printf("| tokens x heads x dim | states | pieces x slots x blocks/SM | us | TB/s |\n");
  printf("| --- | --- | --- | --- | --- |\n");
  for (const Row& r : rows) {
    const int64_t row_elts = int64_t(r.tokens) * r.heads * r.dim;
    const int64_t rows_n = int64_t(r.tokens) * r.heads;
    // o [T, n, H, D], lse [T, n, H]: one source of n states (merge_states_n's layout).
    std::vector<bf16> h_o(size_t(row_elts) * r.states);
    std::vector<float> h_lse(size_t(rows_n) * r.states);
    uint32_t x = 12345;
    auto rnd = [&] { return (x = x * 1664525u + 1013904223u) >> 8; };
    for (auto& v : h_o) v = __float2bfloat16(float(rnd() % 2001) / 1000.f - 1.f);
    for (size_t i = 0; i < h_lse.size(); ++i) {
      h_lse[i] = (rnd() % 17 == 0) ? -INFINITY : float(rnd() % 1001) / 100.f - 5.f;
    }
    bf16 *o, *out;
    float *lse, *lse_out;
    CK(cudaMalloc(&o, h_o.size() * sizeof(bf16)));
    CK(cudaMalloc(&lse, h_lse.size() * sizeof(float)));
    CK(cudaMalloc(&out, size_t(row_elts) * sizeof(bf16)));
    CK(cudaMalloc(&lse_out, size_t(rows_n) * sizeof(float)));
    CK(cudaMemcpy(o, h_o.data(), h_o.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(lse, h_lse.data(), h_lse.size() * sizeof(float), cudaMemcpyHostToDevice));
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
    std::vector<bf16> first;
    std::vector<bf16> got(static_cast<size_t>(row_elts));
    for (const Variant& v : kVariants) {
      if (v.slots < r.states || (r.dim / 8) % v.pieces != 0) continue;
      CK(cudaMemsetAsync(out, 0xff, size_t(row_elts) * sizeof(bf16), s));
      v.fn(p, s);
      CK(cudaGetLastError());
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(got.data(), out, got.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
      const char* check = "same";
      if (first.empty()) {
        first = got;
        check = "first";
      } else if (memcmp(first.data(), got.data(), got.size() * sizeof(bf16)) != 0) {
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
      printf("| %d x %d x %d | %d | %d x %d x %d | %.1f | %.2f | %s\n", r.tokens, r.heads, r.dim,
             r.states, v.pieces, v.slots, v.blocks, us, bytes / us * 1e-6, check);
    }
    CK(cudaFree(o));
    CK(cudaFree(lse));
    CK(cudaFree(out));
    CK(cudaFree(lse_out));
  }
  return bad ? 2 : 0;
}
