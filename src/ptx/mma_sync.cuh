// Warp-level tensor-core MMA (mma.sync): the decode kernel's QK^T and PV products, where the M
// dimension is a 16-row slice of (q heads x draft tokens x beams) of one KV head.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hopattn::ptx {

// PTX ISA "mma" (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32), d += a * b.
// g = lane / 4, q = lane % 4. a[0]: (row g, k 2q..2q+1), a[1]: row g+8, a[2]: k+8, a[3]: both;
// b0: (k 2q..2q+1, n g), b1: k+8; d[0..1]: (row g, n 2q..2q+1), d[2..3]: row g+8.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// PTX ISA "mma" (mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32), same fragments.
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class Elt>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  if constexpr (std::is_same_v<Elt, __nv_bfloat16>) {
    mma_m16n8k16_bf16(d, a, b0, b1);
  } else {
    static_assert(std::is_same_v<Elt, __half>, "mma_m16n8k16: bf16 or fp16");
    mma_m16n8k16_f16(d, a, b0, b1);
  }
}

}  // namespace hopattn::ptx
