// Warp and warpgroup identity. A warpgroup is 4 consecutive warps whose first warp index is a
// multiple of 4 (PTX ISA "Warpgroup"); wgmma, setmaxnreg and the .aligned instructions are
// executed by whole warpgroups.
#pragma once

#include <cstdint>

namespace hopattn::ptx {

inline constexpr int kWarpSize = 32;
inline constexpr int kWarpgroupThreads = 128;

// threadIdx.x / 128, made visibly warp-uniform (a shuffle from lane 0) so the compiler keeps
// role branches free of divergence handling.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}

// Warp index within its warpgroup (0..3), warp-uniform.
__device__ __forceinline__ int warp_index_in_warpgroup() {
  return __shfl_sync(0xffffffffu, (static_cast<int>(threadIdx.x) / kWarpSize) % 4, 0);
}

// PTX ISA "elect.sync": true in exactly one active lane of the warp (the same one in every lane's
// view), without the branch a lane-id compare needs.
__device__ __forceinline__ bool elect_one_lane() {
  uint32_t elected = 0;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b32 lane;\n"
      "elect.sync lane|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(elected));
  return elected != 0;
}

}  // namespace hopattn::ptx
