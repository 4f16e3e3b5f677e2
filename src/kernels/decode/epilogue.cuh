// Decode kernel epilogue pieces: the final lse and output scale of a row from its log2 lse (sinks
// join the denominator here) and the 16-byte and 8-byte stores of out, for the kernel's own
// output and the merge of the splits. Schedule: README.md beside this file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/decode/mainloop.cuh"
#include "ptx/atomic.cuh"

namespace hopattn::kernels::decode {

// Whether this CTA is the last of its problem's splits to finish; every thread calls it after
// storing its partials. The first barrier orders every thread's partial stores before thread
// 0's acq_rel increment, whose release is cumulative over them, and its acquire is ordered by the
// second barrier before the last CTA's loads of the other partials: the pattern of cooperative
// groups' grid sync (one fence by one thread). A __threadfence() by every thread before the
// increment and after it cost each CTA two gpu-scope fences on the critical path of a batch-1
// call. The counter wraps to 0 after num_splits increments: reset for the next launch.
__device__ __forceinline__ bool last_split_to_finish(const Params& p, CtaShared& cs,
                                                     int64_t problem) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t last = static_cast<uint32_t>(p.num_splits - 1);
    cs.is_last = ptx::atomic_inc_acq_rel_gpu(p.semaphores + problem, last) == last ? 1u : 0u;
  }
  __syncthreads();
  return cs.is_last != 0u;
}

// log2(2^lse2 + 2^sink2): the sink joins the denominator only (DESIGN.md).
__device__ __forceinline__ float add_sink(float lse2, float sink2) {
  const float mx = fmaxf(lse2, sink2);
  if (mx == -INFINITY) return -INFINITY;  // no key and a -inf sink: empty (-inf - -inf is NaN)
  return mx + log2f(exp2f(lse2 - mx) + exp2f(sink2 - mx));
}

// Final lse (natural log) and output scale of request row `row` from its sink-free log2 lse;
// the lse is stored only with store_lse (callers whose threads share a row store it once).
__device__ __forceinline__ float finish_row(const Params& p, int request, int kv_head, int row,
                                            float lse2, float v_scale, bool store_lse = true) {
  const RowCoord c = row_coord(p, row);
  const int w = c.beam, i = c.token, h = kv_head * p.group + c.head;
  float total = lse2;
  if (p.sinks != nullptr) total = add_sink(lse2, p.sinks[h * p.sinks_stride] * kLog2e);
  if (store_lse && p.lse != nullptr) {
    const int b = request * p.beam_width + w;
    p.lse[b * p.lse_stride[0] + i * p.lse_stride[1] + h * p.lse_stride[2]] =
        total == -INFINITY ? -INFINITY : total * kLn2;
  }
  return lse2 == -INFINITY ? 0.f : exp2f(lse2 - total) * v_scale;
}

// The kWarps warps' states of a CTA's `rows` rows over disjoint keys, laid out in the drained
// ring for their merge: o [warp][rows][stride] floats, then the running max (log2 domain) m and
// the sum l, [warp][rows] each. A warp that saw no key of a row leaves m = -inf, l = 0, o = 0.
struct WarpStates {
  float* o;
  float* m;
  float* l;
  int rows, stride;

  static constexpr int bytes(int rows, int stride) {
    return (kWarps * rows * stride + 2 * kWarps * rows) * 4;
  }
  __device__ WarpStates(void* base, int rows_, int stride_)
      : o(static_cast<float*>(base)),
        m(o + kWarps * rows_ * stride_),
        l(m + kWarps * rows_),
        rows(rows_),
        stride(stride_) {}
  __device__ float* o_of(int warp) const { return o + warp * rows * stride; }

  // Row rr merged for features d .. d + 3: its o normalized, and its log2 lse in `lse2` (-inf: no
  // key; NaN stays NaN).
  __device__ __forceinline__ float4 merge(int rr, int d, float& lse2) const {
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) top = fmaxf(top, m[w * rows + rr]);
    float total = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float a = top == -INFINITY ? 0.f : exp2f(m[w * rows + rr] - top);
      total += a * l[w * rows + rr];
      const float4 v = *reinterpret_cast<const float4*>(o + (w * rows + rr) * stride + d);
      acc.x += a * v.x, acc.y += a * v.y, acc.z += a * v.z, acc.w += a * v.w;
    }
    lse2 = total == 0.f ? -INFINITY : top + log2f(total);  // NaN stays NaN
    const float inv = total == 0.f ? 0.f : 1.f / total;
    return make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  }
};

template <class Elt>
__device__ __forceinline__ void store_out8(const Params& p, int request, int kv_head, int row,
                                           int d, const float (&v)[8]) {
  const RowCoord c = row_coord(p, row);
  const int w = c.beam, i = c.token, h = kv_head * p.group + c.head;
  const int64_t offset = (request * p.beam_width + w) * p.out_stride[0] + i * p.out_stride[1] +
                         h * p.out_stride[2] + d;
  const uint4 packed = make_uint4(ptx::pack2<Elt>(v[0], v[1]), ptx::pack2<Elt>(v[2], v[3]),
                                  ptx::pack2<Elt>(v[4], v[5]), ptx::pack2<Elt>(v[6], v[7]));
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.out) + offset) = packed;
}

template <class Elt>
__device__ __forceinline__ void store_out4(const Params& p, int request, int kv_head, int row,
                                           int d, float4 v) {
  const RowCoord c = row_coord(p, row);
  const int w = c.beam, i = c.token, h = kv_head * p.group + c.head;
  const int64_t offset = (request * p.beam_width + w) * p.out_stride[0] + i * p.out_stride[1] +
                         h * p.out_stride[2] + d;
  const uint2 packed = make_uint2(ptx::pack2<Elt>(v.x, v.y), ptx::pack2<Elt>(v.z, v.w));
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.out) + offset) = packed;
}

}  // namespace hopattn::kernels::decode
