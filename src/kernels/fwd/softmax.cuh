// Online softmax of one consumer thread's two query rows (row g and g + 8 of its warp's 16), in
// registers. A row spans the four lanes of a quad, so row reductions are a local loop plus two
// xor-shuffles. Logits stay unscaled; the scale (with log2(e) folded in) enters through one FFMA
// per element inside exp2: p = 2^(s * scale_log2 - max * scale_log2).
#pragma once

#include <cmath>

#include "kernels/common/math_constants.hpp"
#include "ptx/fast_math.cuh"

namespace hopattn::kernels::fwd {

// Element i of an accumulator of N/2 registers belongs to row half (i >> 1) & 1.
template <int kRegs>
struct OnlineSoftmax {
  float row_max[2];  // running max of the raw logits; -inf before any visible key
  float row_sum[2];  // running sum of 2^(...) over this thread's columns (quad-reduced at the end)
  float scale_log2;

  __device__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
  }

  __device__ static float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  }
  __device__ static float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
  }

  // The max of row half h of the tile (and `init`) over the quad.
  __device__ static float tile_max(const float (&s)[kRegs], int h, float init) {
    float m = init;
#pragma unroll
    for (int i = 2 * h; i < kRegs; i += 4) m = fmaxf(m, fmaxf(s[i], s[i + 1]));
    return quad_max(m);
  }

  // Row half h of the tile becomes 2^(s * scale_log2 - base); returns this thread's sum of it.
  __device__ float exponentiate(float (&s)[kRegs], int h, float base) const {
    float sum = 0.f;
#pragma unroll
    for (int i = 2 * h; i < kRegs; i += 4) {
      s[i] = ptx::exp2_approx(fmaf(s[i], scale_log2, -base));
      s[i + 1] = ptx::exp2_approx(fmaf(s[i + 1], scale_log2, -base));
      sum += s[i] + s[i + 1];
    }
    return sum;
  }

  // Folds a new S tile in: s becomes P = 2^(s*scale_log2 - new_max*scale_log2) (unnormalized),
  // and `correction` the factor by which the O rows (and the sums) computed so far must shrink.
  __device__ void update(float (&s)[kRegs], float (&correction)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m = tile_max(s, h, row_max[h]);
      // A row that has seen no visible key keeps max = -inf; its exponent base is then taken as
      // 0 so that 2^(-inf - base) = 0 instead of NaN.
      const float base = m == -INFINITY ? 0.f : m * scale_log2;
      correction[h] = m == -INFINITY ? 1.f : ptx::exp2_approx(row_max[h] * scale_log2 - base);
      row_max[h] = m;
      row_sum[h] = row_sum[h] * correction[h] + exponentiate(s, h, base);
    }
  }

  // update() with a lazy running max: a row keeps its exponent base until a new logit exceeds
  // it by more than 2^kLazyRescaleLog2 (after scaling), so that after its first blocks a row
  // almost never needs O rescaled (correction exactly 1: callers skip the multiply, see
  // must_rescale). P values up to 2^kLazyRescaleLog2 fit every format P and the sums are kept
  // in; finalize() divides by the sum taken against the same base, so the result is the softmax
  // all the same.
  static constexpr float kLazyRescaleLog2 = kernels::kLazyRescaleLog2;
  __device__ void update_lazy(float (&s)[kRegs], float (&correction)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m = tile_max(s, h, -INFINITY);
      // The first visible logit (old max -inf) always moves the base: inf > threshold; a row
      // that has seen nothing keeps -inf (NaN > threshold is false) and takes 0 as its base.
      const bool move = (m - row_max[h]) * scale_log2 > kLazyRescaleLog2;
      correction[h] = move ? ptx::exp2_approx((row_max[h] - m) * scale_log2) : 1.f;
      if (move) row_max[h] = m;
      const float base = row_max[h] == -INFINITY ? 0.f : row_max[h] * scale_log2;
      row_sum[h] = row_sum[h] * correction[h] + exponentiate(s, h, base);
    }
  }

  // Whether this warp's O rows need their factors applied: a product by exactly 1 changes
  // nothing, so a warp whose factors are all 1 skips the multiplies (warp-uniform).
  __device__ static bool must_rescale(const float (&correction)[2]) {
    return __any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f);
  }

  // Final normalization: O rows are multiplied by out_scale[h]; lse[h] is the natural-log
  // log-sum-exp of the row's logits (sink included). A row with no visible key and no sink gets
  // out_scale 0 and lse -inf. `sink_log2[h]` = the row's sink * log2(e), or -inf without sinks
  // (per row: with GQA packing the two rows may belong to different q heads).
  __device__ void finalize(const float (&sink_log2)[2], float (&out_scale)[2], float (&lse)[2]) {
    const float sums[2] = {quad_sum(row_sum[0]), quad_sum(row_sum[1])};
    finalize_sums(sums, sink_log2, out_scale, lse);
  }

  // finalize() from the rows' whole sums (quad-reduced, and added over every thread group that
  // kept a part of the row against this row_max).
  __device__ void finalize_sums(const float (&sums)[2], const float (&sink_log2)[2],
                                float (&out_scale)[2], float (&lse)[2]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = sums[h];
      const float m_log2 = row_max[h] == -INFINITY ? -INFINITY : row_max[h] * scale_log2;
      const float top = fmaxf(m_log2, sink_log2[h]);  // both -inf: nothing visible, no sink
      if (top == -INFINITY) {
        // No finite logit and no sink: an empty row (sum 0), or a row whose every visible logit
        // was NaN (sum NaN), which must stay NaN rather than read as empty.
        const bool nan = sum != sum;
        out_scale[h] = nan ? __int_as_float(0x7fffffff) : 0.f;
        lse[h] = nan ? __int_as_float(0x7fffffff) : -INFINITY;
        continue;
      }
      // denominator / 2^top = sum * 2^(m - top) + 2^(sink - top)
      const float keys = m_log2 == -INFINITY ? 0.f : ptx::exp2_approx(m_log2 - top);
      const float sink = sink_log2[h] == -INFINITY ? 0.f : ptx::exp2_approx(sink_log2[h] - top);
      const float denom = fmaf(sum, keys, sink);
      out_scale[h] = keys / denom;
      lse[h] = (top + ptx::log2_approx(denom)) * kLn2;
    }
  }
};

}  // namespace hopattn::kernels::fwd
