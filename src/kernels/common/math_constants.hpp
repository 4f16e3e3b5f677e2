// Constants of the softmax's base-2 arithmetic (scores are scaled by log2(e) so that exp2 does
// the exponentials; LSE goes back to the natural log with ln 2), for kernels and launchers.
#pragma once

namespace hopattn::kernels {

inline constexpr double kLog2eDouble = 1.4426950408889634;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
// The lazy running max of an online softmax: a row keeps its exponent base until a logit exceeds
// it by more than 2^kLazyRescaleLog2 (in log2 units), so P stays <= 2^8 (every P format holds it)
// and O is rarely rescaled (fwd's OnlineSoftmax::update_lazy, keys_as_m.cuh's keys_softmax_lazy).
inline constexpr float kLazyRescaleLog2 = 8.f;

}  // namespace hopattn::kernels
