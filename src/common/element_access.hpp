// Reads and writes one element of a host TensorView as double, whatever its dtype.
#pragma once

#include <cstdint>

#include "common/numeric.hpp"
#include "hopattn/tensor_view.hpp"

namespace hopattn {

inline double load_element(const TensorView& t, int64_t offset) {
  const char* base = static_cast<const char*>(t.data());
  switch (t.dtype()) {
    case DType::kBF16:
      return numeric::bf16_to_float(reinterpret_cast<const uint16_t*>(base)[offset]);
    case DType::kFP16:
      return numeric::fp16_to_float(reinterpret_cast<const uint16_t*>(base)[offset]);
    case DType::kFP32:
      return reinterpret_cast<const float*>(base)[offset];
    case DType::kFP8E4M3:
      return numeric::e4m3_to_float(reinterpret_cast<const uint8_t*>(base)[offset]);
    case DType::kFP8E5M2:
      return numeric::e5m2_to_float(reinterpret_cast<const uint8_t*>(base)[offset]);
    case DType::kInt8:
      return reinterpret_cast<const int8_t*>(base)[offset];
    case DType::kInt32:
      return reinterpret_cast<const int32_t*>(base)[offset];
    case DType::kBool:
      return reinterpret_cast<const uint8_t*>(base)[offset] ? 1.0 : 0.0;
  }
  return 0.0;
}

inline void store_element(const TensorView& t, int64_t offset, double value) {
  char* base = static_cast<char*>(t.data());
  const float f = static_cast<float>(value);
  switch (t.dtype()) {
    case DType::kBF16:
      reinterpret_cast<uint16_t*>(base)[offset] = numeric::float_to_bf16(f);
      break;
    case DType::kFP16:
      reinterpret_cast<uint16_t*>(base)[offset] = numeric::float_to_fp16(f);
      break;
    case DType::kFP32:
      reinterpret_cast<float*>(base)[offset] = f;
      break;
    case DType::kFP8E4M3:
      reinterpret_cast<uint8_t*>(base)[offset] = numeric::float_to_e4m3(f);
      break;
    case DType::kFP8E5M2:
      reinterpret_cast<uint8_t*>(base)[offset] = numeric::float_to_e5m2(f);
      break;
    case DType::kInt8:
      reinterpret_cast<int8_t*>(base)[offset] = numeric::float_to_int8(f);
      break;
    case DType::kInt32:
      reinterpret_cast<int32_t*>(base)[offset] = static_cast<int32_t>(value);
      break;
    case DType::kBool:
      reinterpret_cast<uint8_t*>(base)[offset] = value != 0.0;
      break;
  }
}

}  // namespace hopattn
