// mbarrier: the shared-memory transaction barrier that TMA completes and that producer and
// consumer warps hand buffers over with (HOPPER_NOTES.md section 5). Phases start at 0;
// wait_parity(P) returns once the phase of parity P has completed, so a fresh barrier passes a
// wait on parity 1 and blocks on parity 0.
#pragma once

#include <cstdint>
#include <cuda/ptx>

namespace hopattn::ptx {

// PTX ISA "mbarrier.init": one thread, before any use; then __syncthreads() (and
// fence_mbarrier_init() if another CTA of a cluster will touch it).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  cuda::ptx::mbarrier_init(bar, arrivals);
}

// PTX ISA "fence.mbarrier_init" (membar/fence section): makes initialized barriers visible to the
// cluster's async proxy. Within one CTA __syncthreads() after init is enough.
__device__ __forceinline__ void fence_mbarrier_init() {
  cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
}

// PTX ISA "mbarrier.arrive": one arrival, release semantics at CTA scope (the reads or writes
// this thread made to the guarded buffer happen before a waiter's acquire).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  (void)cuda::ptx::mbarrier_arrive(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                   cuda::ptx::space_shared, bar);
}

// PTX ISA "mbarrier.arrive" with .expect_tx ("mbarrier.expect_tx" section): one arrival that
// also raises the pending transaction count by `bytes`; the TMA copies issued on this barrier
// count it down (out-of-bounds, zero-filled bytes included).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                             cuda::ptx::space_shared, bar, bytes);
}

// PTX ISA "mbarrier.test_wait / mbarrier.try_wait" (.parity form): one bounded try.
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
  return cuda::ptx::mbarrier_try_wait_parity(bar, parity);
}

// Blocks until the phase of parity `parity` has completed. try_wait suspends the thread for a
// hardware-chosen time before returning false, so the loop is not a hot spin.
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

// PTX ISA "Special Registers: %globaltimer": nanoseconds, updated about every microsecond.
__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// mbarrier_wait_parity that gives up after about `timeout_ns` and returns false, so that a
// pipeline bug ends in a diagnosable trap instead of a hung device. The timer is read only after
// the first try failed: a wait that succeeds at once costs what the plain loop costs.
__device__ __forceinline__ bool mbarrier_wait_parity_for(uint64_t* bar, uint32_t parity,
                                                         uint64_t timeout_ns) {
  if (mbarrier_try_wait_parity(bar, parity)) return true;
  const uint64_t start = global_timer_ns();
  while (!mbarrier_try_wait_parity(bar, parity)) {
    if (global_timer_ns() - start > timeout_ns) return false;
  }
  return true;
}

// A pipeline wait that has not completed in this long is a bug (a wrong parity, arrival count or
// byte count): the kernels trap, so the host gets a launch failure instead of a hung device (no
// printf: a call in the kernel would make ptxas serialize the wgmma pipeline).
inline constexpr uint64_t kHangTimeoutNs = 20'000'000'000ull;

__device__ __forceinline__ void mbarrier_wait_or_trap(uint64_t* bar, uint32_t parity) {
  if (!mbarrier_wait_parity_for(bar, parity, kHangTimeoutNs)) __trap();
}

// Position in a ring of kStages buffers guarded by full/empty barrier pairs. Iteration `it`
// uses stage it % kStages; its phase flips every kStages iterations. Consumers wait full[stage]
// on phase(); producers wait empty[stage] on phase() ^ 1, which a fresh barrier passes (the
// first lap needs no release).
template <int kStages>
struct PipelineState {
  uint32_t iteration = 0;
  __device__ __forceinline__ uint32_t stage() const { return iteration % kStages; }
  __device__ __forceinline__ uint32_t phase() const { return (iteration / kStages) & 1u; }
  __device__ __forceinline__ void advance() { ++iteration; }
};

}  // namespace hopattn::ptx
