// Approximate transcendental functions of the special function unit, as the softmax uses them.
#pragma once

namespace hopattn::ptx {

// PTX ISA "ex2" (ex2.approx.ftz.f32): 2^x, 2^-inf = 0; about 2 ulp.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// PTX ISA "lg2" (lg2.approx.ftz.f32): log2(x), log2(0) = -inf.
__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// PTX ISA "rcp" (rcp.approx.ftz.f32): 1/x within 1 ulp, 1/inf = 0; no IEEE slow path.
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// PTX ISA "tanh" (tanh.approx.f32, sm_75+): max relative error about 2^-11, used by softcap.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace hopattn::ptx
