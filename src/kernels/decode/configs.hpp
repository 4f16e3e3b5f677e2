// The decode family's configuration table, in plain C++ (the validator, the planner and the CPU
// build read it): one row per head dim the CUDA kernels are built for (K and V of that one head
// dim), each with bf16 and fp16 q over every KV format of kKvFormats. The traits (traits.hpp's
// head-dim check and has_three_cta_variant), the instantiations (hd*.cu), the dispatch
// (configs.cuh's visit_head_dim, launch.cu), the planner's head-dim rule and messages
// (src/plan/decode_plan.cpp) and the validator's (src/api/validate_decode.cpp, hence the support
// matrix) derive from it. Adding a head dim: a row here and an hd<D>.cu file with its
// instantiation line (one head dim a file, so that two cores build them in parallel).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "hopattn/dtype.hpp"

namespace hopattn::kernels::decode {

// How the KV cache stores its values. kNative16 = q's own 16-bit type (no conversion).
enum class KvFormat : uint8_t { kNative16, kE4M3, kE5M2, kInt8 };

constexpr int kv_format_bytes(KvFormat f) { return f == KvFormat::kNative16 ? 2 : 1; }

// The KV formats every head dim is built for, in dispatch order: q's own 16-bit type, then the
// 8-bit codes dequantized by k_scale / v_scale.
inline constexpr KvFormat kKvFormats[] = {KvFormat::kNative16, KvFormat::kE4M3, KvFormat::kE5M2,
                                          KvFormat::kInt8};
inline constexpr int kNumKvFormats = static_cast<int>(sizeof(kKvFormats) / sizeof(KvFormat));

// The cache dtype of a KV format with q of dtype `q`.
constexpr DType kv_format_dtype(KvFormat f, DType q) {
  switch (f) {
    case KvFormat::kE4M3:
      return DType::kFP8E4M3;
    case KvFormat::kE5M2:
      return DType::kFP8E5M2;
    case KvFormat::kInt8:
      return DType::kInt8;
    default:
      return q;
  }
}

// The 8-bit row of kKvFormats whose cache dtype is kv, else kNative16 (q's own type, or a
// dtype no row has: the callers check that apart).
constexpr KvFormat kv_format_of(DType kv) {
  for (const KvFormat f : kKvFormats) {
    if (f != KvFormat::kNative16 && kv_format_dtype(f, DType::kBF16) == kv) return f;
  }
  return KvFormat::kNative16;
}

struct DecodeConfig {
  int head_dim;
  // Also built with three CTAs per SM (traits.hpp) for bf16 q over a bf16, fp8 e4m3 or fp8 e5m2
  // cache: the benchmarked cases only, three extra kernels for the device build. With an 8-bit
  // cache two CTAs an SM (8 warps) leave the kernel latency-bound at ~50% of the issue slots
  // (ncu, 2026-12-03), and half the bytes a stage give the three-CTA ring four stages.
  bool three_ctas;
};

inline constexpr DecodeConfig kDecodeConfigs[] = {
    {64, false},
    {128, true},
    {256, false},
};
inline constexpr int kNumDecodeConfigs =
    static_cast<int>(sizeof(kDecodeConfigs) / sizeof(DecodeConfig));

// Row of head dim `d` in kDecodeConfigs, or -1 when it is not built.
constexpr int decode_config_index(int64_t d) {
  for (int i = 0; i < kNumDecodeConfigs; ++i) {
    if (kDecodeConfigs[i].head_dim == d) return i;
  }
  return -1;
}

// Whether the decode kernels are built for head dim `d` (of K and V both).
constexpr bool built_head_dim(int64_t d) { return decode_config_index(d) >= 0; }

// Whether a (head dim, q dtype, KV format) has the three-CTAs-per-SM instantiation.
constexpr bool has_three_cta_variant(int head_dim, bool bf16, KvFormat format) {
  const int i = decode_config_index(head_dim);
  return i >= 0 && kDecodeConfigs[i].three_ctas && bf16 &&
         (format == KvFormat::kNative16 || format == KvFormat::kE4M3 || format == KvFormat::kE5M2);
}

// Calls f(std::integral_constant<KvFormat, F>{}) for the row F == format of kKvFormats; false,
// calling nothing, when no row is (every KvFormat value is one).
template <int kIndex = 0, class F>
bool visit_kv_format(KvFormat format, F&& f) {
  if constexpr (kIndex == kNumKvFormats) {
    return false;
  } else {
    if (kKvFormats[kIndex] == format) {
      f(std::integral_constant<KvFormat, kKvFormats[kIndex]>{});
      return true;
    }
    // After this row's f, so that its instantiations come (and are laid out) in the table's order.
    return visit_kv_format<kIndex + 1>(format, f);
  }
}

// "64, 128, 256" (last = ", ") or "64, 128 or 256" (last = " or "): the built head dims.
inline std::string built_head_dims_string(const char* last = ", ") {
  std::string s;
  for (int i = 0; i < kNumDecodeConfigs; ++i) {
    s += (i == 0 ? "" : (i + 1 == kNumDecodeConfigs ? last : ", ")) +
         std::to_string(kDecodeConfigs[i].head_dim);
  }
  return s;
}

// Calls f(std::integral_constant<int, D>{}) for the row of head dim d; false, calling nothing,
// when d is not built.
template <int kIndex = 0, class F>
bool visit_head_dim(int64_t d, F&& f) {
  if constexpr (kIndex == kNumDecodeConfigs) {
    return false;
  } else {
    if (kDecodeConfigs[kIndex].head_dim != d) return visit_head_dim<kIndex + 1>(d, f);
    f(std::integral_constant<int, kDecodeConfigs[kIndex].head_dim>{});
    return true;
  }
}

}  // namespace hopattn::kernels::decode
