// Proxy fences: shared memory written by ordinary stores (the generic proxy) and then read by
// TMA or wgmma (the async proxy) must be fenced by each writing thread before the barrier that
// hands it over (HOPPER_NOTES.md section 4, "Proxy rule").
#pragma once

#include <cuda/ptx>

namespace hopattn::ptx {

// PTX ISA "membar / fence" (fence.proxy.async.shared::cta).
__device__ __forceinline__ void fence_proxy_async_shared() {
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
}

}  // namespace hopattn::ptx
