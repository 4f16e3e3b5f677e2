// Host side of TMA: encodes a CUtensorMap with the driver's cuTensorMapEncodeTiled, looked up
// through the runtime (cudaGetDriverEntryPointByVersion; cudaGetDriverEntryPoint is deprecated in
// CUDA 13) so that hopattn does not link libcuda directly. Host-only; include from .cu or .cpp
// files compiled with the CUDA toolkit.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <sstream>

#include "hopattn/dtype.hpp"
#include "hopattn/error.hpp"

namespace hopattn::ptx {

// One tiled tensor map: dimensions innermost first (as TMA coordinates are given).
struct TensorMapSpec {
  void* base = nullptr;  // 16-B aligned global address of element (0, 0, ...)
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  int element_bytes = 2;
  int rank = 2;                       // 1..5
  std::array<uint64_t, 5> dims{};     // elements per dimension
  std::array<uint64_t, 5> strides{};  // bytes; strides[i] for dims[i], i >= 1 (strides[0] unused)
  std::array<uint32_t, 5> box{};      // box extent per dimension, 1..256
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
};

// The tensor-map element type of a 16-bit tensor (bf16, else fp16).
inline CUtensorMapDataType tensor_map_dtype_16bit(DType dtype) {
  return dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// A rank-`rank` map of a 16-bit tensor at `base`; dims, strides and box are the caller's.
inline TensorMapSpec tensor_map_spec_16bit(void* base, DType dtype, int rank) {
  TensorMapSpec s;
  s.base = base;
  s.dtype = tensor_map_dtype_16bit(dtype);
  s.element_bytes = 2;
  s.rank = rank;
  return s;
}

inline std::string describe(const TensorMapSpec& s) {
  std::ostringstream os;
  os << "rank " << s.rank << ", base " << s.base << ", dims [";
  for (int i = 0; i < s.rank; ++i) os << (i ? ", " : "") << s.dims[i];
  os << "], byte strides [";
  for (int i = 1; i < s.rank; ++i) os << (i > 1 ? ", " : "") << s.strides[i];
  os << "], box [";
  for (int i = 0; i < s.rank; ++i) os << (i ? ", " : "") << s.box[i];
  os << "], element bytes " << s.element_bytes;
  return os.str();
}

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                             cudaEnableDefault, &status);
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || ptr == nullptr) {
      throw Error(ErrorKind::kRuntime,
                  detail::concat("hopattn: cannot find the driver's cuTensorMapEncodeTiled "
                                 "(cudaGetDriverEntryPointByVersion: ",
                                 cudaGetErrorString(err), ", status ", static_cast<int>(status),
                                 "); a driver for CUDA 12.0 or newer is required"));
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// Checks the limits TMA documents (so a bad stride gives a message, not CUDA_ERROR_INVALID_VALUE)
// and encodes. Throws hopattn::Error: kValue for a spec TMA cannot express, kRuntime otherwise.
inline CUtensorMap encode_tensor_map(const TensorMapSpec& s) {
  const auto fail = [&](const std::string& what) {
    throw Error(ErrorKind::kValue, detail::concat("TMA tensor map (", describe(s), "): ", what));
  };
  if (s.rank < 1 || s.rank > 5) fail("rank must be 1..5");
  if (reinterpret_cast<uintptr_t>(s.base) % 16 != 0) fail("base address must be 16-B aligned");
  for (int i = 0; i < s.rank; ++i) {
    if (s.dims[i] == 0 || s.dims[i] > (uint64_t{1} << 32)) fail("each dim must be 1..2^32");
    if (s.box[i] == 0 || s.box[i] > 256) fail("each box extent must be 1..256");
    if (i > 0 && (s.strides[i] % 16 != 0 || s.strides[i] >= (uint64_t{1} << 40))) {
      fail("byte strides must be multiples of 16 below 2^40");
    }
  }
  if (s.box[0] * s.element_bytes % 16 != 0) fail("the inner box extent must span 16*k bytes");
  if (s.swizzle == CU_TENSOR_MAP_SWIZZLE_128B && s.box[0] * s.element_bytes > 128) {
    fail("with 128B swizzle the inner box extent must span at most 128 bytes");
  }
  CUtensorMap map{};
  std::array<cuuint64_t, 5> dims{};
  std::array<cuuint64_t, 4> strides{};
  std::array<cuuint32_t, 5> box{};
  std::array<cuuint32_t, 5> element_strides{1, 1, 1, 1, 1};
  for (int i = 0; i < s.rank; ++i) {
    dims[i] = s.dims[i];
    box[i] = s.box[i];
    if (i > 0) strides[i - 1] = s.strides[i];
  }
  const CUresult res = tensor_map_encoder()(
      &map, s.dtype, static_cast<cuuint32_t>(s.rank), s.base, dims.data(), strides.data(),
      box.data(), element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, s.swizzle, s.l2_promotion,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    throw Error(ErrorKind::kRuntime, detail::concat("cuTensorMapEncodeTiled failed with CUresult ",
                                                    static_cast<int>(res), " for ", describe(s)));
  }
  return map;
}

}  // namespace hopattn::ptx
