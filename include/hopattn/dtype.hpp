// Element types understood by hopattn, with names and sizes for messages and address math.
#pragma once

#include <cstdint>
#include <ostream>

namespace hopattn {

enum class DType : uint8_t {
  kBF16,
  kFP16,
  kFP32,
  kFP8E4M3,  // OCP e4m3fn: no infinities, one NaN pattern, max 448
  kFP8E5M2,  // OCP e5m2: IEEE-like, max 57344
  kInt8,
  kInt32,
  kBool,  // one byte per element (masks)
};

constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kFP16:
      return 2;
    case DType::kFP32:
    case DType::kInt32:
      return 4;
    default:
      return 1;
  }
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16:
      return "bf16";
    case DType::kFP16:
      return "fp16";
    case DType::kFP32:
      return "fp32";
    case DType::kFP8E4M3:
      return "fp8_e4m3";
    case DType::kFP8E5M2:
      return "fp8_e5m2";
    case DType::kInt8:
      return "int8";
    case DType::kInt32:
      return "int32";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace hopattn
