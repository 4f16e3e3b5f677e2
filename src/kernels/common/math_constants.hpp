// Constants of the softmax's base-2 arithmetic (scores are scaled by log2(e) so that exp2 does
// the exponentials; LSE goes back to the natural log with ln 2), for kernels and launchers.
#pragma once

namespace hopattn::kernels {

inline constexpr double kLog2eDouble = 1.4426950408889634;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

}  // namespace hopattn::kernels
