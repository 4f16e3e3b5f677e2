// Ampere-style asynchronous global -> shared copies: the decode kernel's page gather, where every
// 16-byte piece of a KV row may come from a different page (no tensor map can describe that).
#pragma once

#include <cstdint>

namespace hopattn::ptx {

// PTX ISA "cp.async" (cp.async.cg.shared.global, 16 bytes, L2 only). src_bytes < 16 zero-fills
// the rest; src_bytes = 0 reads nothing and writes 16 zero bytes (out-of-range KV rows).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}

// The same with a shared-window address (ptx/shared_memory.cuh): one register instead of two.
__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem_src,
                                            int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}

// The same with the .L2::256B prefetch hint: a miss fetches the 256-byte span around the piece
// into the L2, for rows read whole whose pieces arrive in several copies.
__device__ __forceinline__ void cp_async_16_l2_256(uint32_t smem_dst, const void* gmem_src,
                                                   int src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem_dst),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
}

// PTX ISA "cp.async.mbarrier.arrive" (.noinc): an arrival on `bar` that fires once every
// cp.async this thread issued so far has landed. `.noinc` leaves the pending count alone, so the
// barrier's init count must include one arrival per thread that signals this way. The copies
// are generic-proxy writes: a reader that hands the data to wgmma or TMA fences
// (fence_proxy_async_shared) after its wait.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr) : "memory");
}

// PTX ISA "cp.async.commit_group": closes the group of this thread's copies issued so far.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// PTX ISA "cp.async.wait_group": waits until at most `kPending` of this thread's groups are in
// flight. Other threads' copies become visible only after a barrier that follows this wait.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace hopattn::ptx
