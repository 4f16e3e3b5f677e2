// ldmatrix: shared-memory 8x8 b16 tiles into mma.sync fragments.
#pragma once

#include <cstdint>

namespace hopattn::ptx {

// PTX ISA "ldmatrix" (ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16). Lanes 8i..8i+7 give the
// 16-byte row addresses of matrix i; r[i] of lane l holds rows 2(l%4), 2(l%4)+1 of column l/4
// of matrix i (low half = lower row): the B fragment of a k-major [k][n] tile, e.g. V [key][d].
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// PTX ISA "ldmatrix" (ldmatrix.sync.aligned.m8n8.x4.shared.b16): as above without the transpose;
// r[i] of lane l holds row l/4, columns 2(l%4), 2(l%4)+1 of matrix i: the A fragment of a row-major
// [m][k] tile (e.g. K [key][d]) or the B fragment of an n-major [n][k] one (e.g. q [row][d]).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row)
               : "memory");
}

// The same with a shared-window address (ptx/shared_memory.cuh), transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row)
               : "memory");
}

// PTX ISA "movmatrix" (movmatrix.sync.aligned.m8n8.trans.b16): the transpose of an 8x8 b16 matrix
// held as mma fragments (lane l: row l/4, columns 2(l%4), 2(l%4)+1), in the same fragment layout.
// An m16n8 accumulator's half, packed to 16 bits, becomes the B fragment of its transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

}  // namespace hopattn::ptx
