// The fuzzer's CUDA implementation (check.hpp): the public API on device copies of a case's host
// tensors. Every input view is uploaded as it lies in memory (same strides, same offset from a
// 256-byte boundary, so alignment is the host's), every output is poisoned with 0xff bytes (NaN
// in bf16/fp16/fp32) on the device before the call, and after it the outputs are downloaded into
// the host tensors, from which read_outputs() takes them exactly as public_api() does. Views
// sharing memory (k and v of one buffer, a combined MLA cache) share it on the device too.
#pragma once

#include "fuzz/check.hpp"

namespace hopattn::fuzz {

// hopattn's public API on CUDA tensors; declines (skips) what the CUDA path leaves to the CPU:
// kNotImplemented, and the validators' CUDA-only rules (fp32, TMA strides and alignment).
// A CUDA error (a fault, a hang past 60 s) leaves the device unusable: it prints the case line
// and exits the process with status 3.
Implementation cuda_api();

}  // namespace hopattn::fuzz
