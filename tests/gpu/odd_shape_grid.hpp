// The odd-shape grid every attention kernel test runs (dtype x batch 1/17 x q_len 1/239 x
// kv_len 1/113 x causal x GQA 1/5/8), shared so fwd and bwd cover exactly the same shapes.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "hopattn/dtype.hpp"

namespace hopattn::testing {

// (dtype, batch, q_len, kv_len, causal, GQA index into kOddGridKvHeads / kOddGridGroup)
using OddShapeParam = std::tuple<DType, int, int, int, bool, int>;

inline constexpr int kOddGridKvHeads[] = {2, 1, 2};
inline constexpr int kOddGridGroup[] = {1, 5, 8};

inline auto odd_shape_values() {
  return ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16), ::testing::Values(1, 17),
                            ::testing::Values(1, 239), ::testing::Values(1, 113), ::testing::Bool(),
                            ::testing::Values(0, 1, 2));
}

// The same shapes in one dtype (head dims whose CPU reference is slow run the grid once).
inline auto odd_shape_values(DType dtype) {
  return ::testing::Combine(::testing::Values(dtype), ::testing::Values(1, 17),
                            ::testing::Values(1, 239), ::testing::Values(1, 113), ::testing::Bool(),
                            ::testing::Values(0, 1, 2));
}

inline std::string odd_shape_name(const ::testing::TestParamInfo<OddShapeParam>& info) {
  constexpr const char* kGqa[] = {"mha", "gqa5", "gqa8"};
  const OddShapeParam& p = info.param;
  return std::string(dtype_name(std::get<0>(p))) + "_b" + std::to_string(std::get<1>(p)) + "_q" +
         std::to_string(std::get<2>(p)) + "_k" + std::to_string(std::get<3>(p)) +
         (std::get<4>(p) ? "_causal_" : "_full_") + kGqa[std::get<5>(p)];
}

}  // namespace hopattn::testing
