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

}  // namespace hopattn::ptx
