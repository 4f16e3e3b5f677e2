// Register reallocation between warpgroups (HOPPER_NOTES.md section 6). Executed by all warps of
// a warpgroup; needs a register cap at kernel entry (__launch_bounds__(threads, 1)), otherwise
// ptxas ignores it with warning C7508.
#pragma once

#include <cstdint>

namespace hopattn::ptx {

// PTX ISA "setmaxnreg" (.inc): blocks until the CTA's pool can supply the registers.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg: 24..256, step 8");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// PTX ISA "setmaxnreg" (.dec): returns registers to the CTA's pool.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg: 24..256, step 8");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Moves this warpgroup from the kernel's launch count `kFrom` to `kTo` registers: .inc when that
// is more, .dec when less (an .inc to fewer registers than held is an illegal instruction).
template <uint32_t kTo, uint32_t kFrom>
__device__ __forceinline__ void setmaxnreg_to() {
  if constexpr (kTo > kFrom) {
    setmaxnreg_inc<kTo>();
  } else if constexpr (kTo < kFrom) {
    setmaxnreg_dec<kTo>();
  }
}

}  // namespace hopattn::ptx
