// The decode kernel's launch plan: how one call is cut into CTAs (rows per CTA, row tiles, kernel
// configuration, split count) and the workspace it needs. Pure C++ (no CUDA): the launch code
// passes the device's SM count in, and the workspace size is answered in builds without CUDA too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hopattn/options.hpp"

namespace hopattn::plan {

// The decode family's largest q_len (speculative drafts): the validator's bound and the batch
// planner's for the decode runs of its concurrent form.
inline constexpr int kDecodeMaxQLen = 16;

// How one decode call is cut into CTAs, and the workspace it needs. A pure function of the
// shapes, the options and the SM count: no tensor data is read and no device is queried.
struct DecodePlan {
  int requests = 0;          // B / beam_width (beam_width 1 without shared_kv_lens)
  int beam_width = 1;        // beams whose rows share one CTA (and one prefix read)
  int rows_per_request = 0;  // beam_width * q_len * (Hq / Hkv)
  int rows_per_cta = 0;      // 16, 32 or 64
  int row_tiles = 0;         // ceil(rows_per_request / rows_per_cta)
  int num_splits = 1;
  // Kernel configuration: CTAs per SM it is built for (kernels/decode/traits.hpp; the rows of
  // configs.hpp marked three_ctas): 3 for D = 128 bf16 over a bf16 cache with <= 32 rows a CTA
  // where the grid holds more than two CTAs an SM; else 2 (docs/perf/decode.md, run 19 and run
  // set l; tests set 2 to cover that kernel too).
  int config = 2;
  // The small-grid kernel (kernels/decode/small_kernel.cuh) instead: DecodeOptions::kernel, or
  // by kAuto wherever small_kernel_takes() the call. Same grid and workspace layout as config 2;
  // config 3 there is its instance of three CTAs an SM over an e4m3 or int8 cache, taken where
  // it runs the grid in fewer waves than two an SM (small_three_ctas_take_fewer_waves).
  bool small = false;
  // The narrow kernel (kernels/decode/narrow_kernel.cuh) instead: DecodeOptions::kernel ==
  // kNarrow only (kAuto does not take it). Same grid as the small kernel, one split.
  bool narrow = false;
  int64_t problems = 0;        // requests * Hkv * row_tiles (one semaphore each)
  size_t semaphore_bytes = 0;  // at the workspace's start
  size_t partial_o_offset = 0;
  size_t partial_lse_offset = 0;
  size_t workspace_bytes = 0;  // 0 when num_splits == 1
};

// Whether the small-grid kernel computes this call: beam width 1, no tree mask, one row tile of
// 16 rows a request (q_len * Hq / Hkv <= 16), D = 64 or 128 (any KV format). Shapes as the
// validator accepts them.
bool small_kernel_takes(const DecodeArgs& args, const DecodeOptions& opts);

// What the forced kernel `kernel` (kSmall or kNarrow) takes, for the errors of a call it does not
// take (the validator's and plan_decode's): its *_kernel_takes below in words.
const char* forced_kernel_scope(DecodeKernel kernel);

// Whether the narrow kernel computes this call: beam width 1, no tree mask, at most 8 rows a
// request (q_len * Hq / Hkv <= 8), D = 64 or 128, a 16-bit cache of q's dtype in pages of a
// multiple of 16 keys, and at most one split asked for. Shapes as the validator accepts them.
bool narrow_kernel_takes(const DecodeArgs& args, const DecodeOptions& opts);

// Whether a grid of `ctas` CTAs runs in fewer waves at three CTAs an SM than at two on
// `num_sms` SMs (the small kernel's three-CTA instance; its CTAs take ~1.5x as long each, so it
// pays only where it saves a whole wave).
bool small_three_ctas_take_fewer_waves(int64_t ctas, int num_sms);

// The largest Hopper part's SM count. The workspace is sized for it, so decode_workspace_size is
// a function of the shapes alone, valid on any sm_90 device.
inline constexpr int kHopperMaxSms = 132;

// The plan for a device of `num_sms` SMs. The split heuristic is not monotone in the SM count
// (decode_splits.hpp), so the split count is at most the one for kHopperMaxSms SMs: a plan never
// needs more workspace than decode_workspace_bytes reports. Throws hopattn::Error for shapes the
// kernels do not take (head dims other than 64/128/256, more than kMaxBeams beams).
DecodePlan plan_decode(const DecodeArgs& args, const DecodeOptions& opts, int num_sms);

// Bytes of workspace of any plan of this call (0: no split): the plan for kHopperMaxSms SMs.
inline size_t decode_workspace_bytes(const DecodeArgs& args, const DecodeOptions& opts) {
  return plan_decode(args, opts, kHopperMaxSms).workspace_bytes;
}

}  // namespace hopattn::plan
