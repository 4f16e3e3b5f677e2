// stmatrix: mma-fragment 8x8 b16 tiles to shared memory.
#pragma once

#include <cstdint>

namespace hopattn::ptx {

// PTX ISA "stmatrix" (stmatrix.sync.aligned.m8n8.x4.trans.shared.b16). r[i] of lane l holds
// elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix i (the accumulator layout's
// row l / 4, low half first); with .trans, lanes 8i .. 8i + 7 give the 16-byte addresses of
// matrix i's stored rows j = lane % 8, and row j receives column j: the transposed tile.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t smem_row, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_row),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

}  // namespace hopattn::ptx
