// The MLA family's configuration table, in plain C++ (the validator and the CPU build read it):
// one row per (q dtype, cache format) the CUDA kernel is built for, at the one head-dim shape of
// src/plan/mla_tiles.hpp (512 latent + 64 rope). The traits types, the instantiations
// (kernel_*.cu), the dispatch (configs.cuh, launch.cu), the validator's cache-dtype rule and its
// message (src/api/validate_mla.cpp, hence the support matrix) derive from it. Adding a
// configuration: a row here and a kernel_*.cu file with its instantiation line (one configuration
// a file, so that two cores build them in parallel).
#pragma once

#include <cstdint>
#include <string>

#include "hopattn/dtype.hpp"

namespace hopattn::kernels::mla {

struct MlaConfig {
  DType q;         // q_nope, q_pe and out; bf16 or fp16
  bool fp8_cache;  // ckv / kpe in fp8 e4m3 (real = stored * kv_scale), else in q's dtype
};

inline constexpr MlaConfig kMlaConfigs[] = {
    {DType::kBF16, false},
    {DType::kFP16, false},
    {DType::kBF16, true},
    {DType::kFP16, true},
};
inline constexpr int kNumMlaConfigs = static_cast<int>(sizeof(kMlaConfigs) / sizeof(MlaConfig));

// The cache dtype of a row: fp8 e4m3, or q's own.
constexpr DType cache_dtype(const MlaConfig& c) { return c.fp8_cache ? DType::kFP8E4M3 : c.q; }

// Row of (q dtype, cache dtype) in kMlaConfigs, or -1 when that pair is not built.
constexpr int mla_config_index(DType q, DType cache) {
  for (int i = 0; i < kNumMlaConfigs; ++i) {
    if (kMlaConfigs[i].q == q && cache_dtype(kMlaConfigs[i]) == cache) return i;
  }
  return -1;
}

// Whether the kernel is built for q in dtype `q` over a cache in dtype `cache`.
constexpr bool built_config(DType q, DType cache) { return mla_config_index(q, cache) >= 0; }

// "(bf16, bf16), (fp16, fp16), (bf16, fp8_e4m3), ...": the built (q, cache) dtype pairs.
inline std::string built_configs_string() {
  std::string s;
  for (const MlaConfig& c : kMlaConfigs) {
    s += (s.empty() ? "(" : ", (") + std::string(dtype_name(c.q)) + ", " +
         dtype_name(cache_dtype(c)) + ")";
  }
  return s;
}

}  // namespace hopattn::kernels::mla
