// Tensor Memory Accelerator (TMA) copies through CCCL's cuda::ptx (HOPPER_NOTES.md section 4).
// The tensor map is built on the host (ptx/tensor_map.hpp) and passed to the kernel as a
// `const __grid_constant__` parameter (or a member of one); device code passes its address.
// Coordinates are in elements, innermost dimension first, and may fall outside the tensor:
// loads zero-fill those elements (and still count them in the barrier's transaction bytes),
// stores skip them.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cuda/ptx>

namespace hopattn::ptx {

// PTX ISA "prefetch, prefetchu" (prefetch.tensormap): pulls the map into the descriptor cache
// so the first copy does not wait for it.
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// PTX ISA "cp.async.bulk.tensor" (.shared::cta.global.tile.mbarrier::complete_tx::bytes):
// global -> shared box copy completing on `bar`. Issue from one thread.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t c0, int32_t c1) {
  const int32_t coords[2] = {c0, c1};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_shared, cuda::ptx::space_global, smem_dst, map,
                                  coords, bar);
}

__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2) {
  const int32_t coords[3] = {c0, c1, c2};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_shared, cuda::ptx::space_global, smem_dst, map,
                                  coords, bar);
}

__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  const int32_t coords[4] = {c0, c1, c2, c3};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_shared, cuda::ptx::space_global, smem_dst, map,
                                  coords, bar);
}

__device__ __forceinline__ void tma_load_5d(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                            int32_t c4) {
  const int32_t coords[5] = {c0, c1, c2, c3, c4};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_shared, cuda::ptx::space_global, smem_dst, map,
                                  coords, bar);
}

// PTX ISA "cp.async.bulk.tensor" (.global.shared::cta.tile.bulk_group): shared -> global box
// copy in the current bulk group. The source must have been written before a
// fence_proxy_async_shared() + barrier. Issue from one thread, then tma_store_commit().
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src,
                                             int32_t c0, int32_t c1) {
  const int32_t coords[2] = {c0, c1};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, map, coords,
                                  smem_src);
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* smem_src,
                                             int32_t c0, int32_t c1, int32_t c2) {
  const int32_t coords[3] = {c0, c1, c2};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, map, coords,
                                  smem_src);
}

__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* smem_src,
                                             int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  const int32_t coords[4] = {c0, c1, c2, c3};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, map, coords,
                                  smem_src);
}

// PTX ISA "cp.async.bulk.commit_group": closes the bulk group of the stores issued so far.
__device__ __forceinline__ void tma_store_commit() { cuda::ptx::cp_async_bulk_commit_group(); }

// PTX ISA "cp.async.bulk.wait_group" (.read): at most kPending groups may still be reading their
// shared-memory source; the buffers of the others may be overwritten.
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<kPending>{});
}

// PTX ISA "cp.async.bulk.wait_group": the writes to global memory are complete too (needed
// before the CTA exits or before another kernel-side reader uses the data).
template <int kPending>
__device__ __forceinline__ void tma_store_wait_all() {
  cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<kPending>{});
}

// Byte offset of element (row, col) of a [rows][row_bytes = 128] tile written by TMA with
// CU_TENSOR_MAP_SWIZZLE_128B into a 1024-B aligned buffer: the 16-B chunk index is XORed with
// row % 8 (HOPPER_NOTES.md section 4, verified on H200). `col_bytes` = col * sizeof(element).
__host__ __device__ __forceinline__ uint32_t swizzle_128b_offset(uint32_t row, uint32_t col_bytes) {
  return row * 128u + ((((col_bytes >> 4) ^ row) & 7u) << 4) + (col_bytes & 15u);
}

}  // namespace hopattn::ptx
