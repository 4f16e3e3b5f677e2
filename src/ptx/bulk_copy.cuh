// Non-tensor bulk copies of the TMA engine (contiguous byte ranges, no tensor map) and the
// global-memory semaphore operations that order them across CTAs. Used by the bwd kernel: row
// statistics (lse, delta) are loaded with cp.async.bulk, and dQ tiles are summed into an fp32
// accumulator in global memory with cp.reduce.async.bulk (HOPPER_NOTES.md section 4).
#pragma once

#include <cstdint>
#include <cuda/ptx>

namespace hopattn::ptx {

// PTX ISA "cp.async.bulk" (.shared::cta.global.mbarrier::complete_tx::bytes): `bytes` (multiple
// of 16, both addresses 16-B aligned) from global to shared memory, completing on `bar` like a
// TMA tensor load (count the bytes in the barrier's expect_tx). Issue from one thread.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes,
                                          uint64_t* bar) {
  cuda::ptx::cp_async_bulk(cuda::ptx::space_shared, cuda::ptx::space_global, smem_dst, gmem_src,
                           bytes, bar);
}

// PTX ISA "cp.reduce.async.bulk" (.global.shared::cta.bulk_group.add.f32): element-wise
// gmem[i] += smem[i] for bytes / 4 floats, performed at L2 (atomic per element, unordered with
// other CTAs' reductions). The shared source must have been written before a
// fence_proxy_async_shared() + barrier; it may be overwritten after bulk_wait_read. Issue from
// one thread, then bulk_commit().
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem_dst, const float* smem_src,
                                                    uint32_t bytes) {
  cuda::ptx::cp_reduce_async_bulk(cuda::ptx::space_global, cuda::ptx::space_shared,
                                  cuda::ptx::op_add, gmem_dst, smem_src, bytes);
}

// PTX ISA "cp.async.bulk.commit_group": closes the bulk group of the operations issued so far.
__device__ __forceinline__ void bulk_commit() { cuda::ptx::cp_async_bulk_commit_group(); }

// PTX ISA "cp.async.bulk.wait_group.read": at most kPending groups may still read their shared
// source.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<kPending>{});
}

// PTX ISA "cp.async.bulk.wait_group": at most kPending groups are incomplete; the others' writes
// (or reductions) to global memory have been performed.
template <int kPending>
__device__ __forceinline__ void bulk_wait_all() {
  cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<kPending>{});
}

// PTX ISA "membar / fence" (fence.proxy.async, all state spaces): orders this thread's
// async-proxy operations (completed bulk reductions) with its later generic-proxy accesses, and
// the other way round.
__device__ __forceinline__ void fence_proxy_async_all() { cuda::ptx::fence_proxy_async(); }

// PTX ISA "ld" (ld.acquire.gpu.global.u32): the semaphore read of an ordered hand-over; later
// reads and writes of this thread happen after it.
__device__ __forceinline__ uint32_t load_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// PTX ISA "red" (red.release.gpu.global.add.u32): the semaphore increment of an ordered
// hand-over; this thread's earlier writes happen before it.
__device__ __forceinline__ void red_add_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

}  // namespace hopattn::ptx
