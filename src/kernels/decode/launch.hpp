// Host entry points of the decode kernel; includable without CUDA headers. The definitions exist
// only in CUDA builds (HOPATTN_WITH_CUDA). Arguments are expected to be validated
// (src/api/validate_decode.cpp) and on one CUDA device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hopattn/options.hpp"

namespace hopattn::kernels::decode {

// How one decode call is cut into CTAs, and the workspace it needs. A pure function of the
// shapes, the options and the device's SM count: no device memory is read.
struct LaunchPlan {
  int requests = 0;          // B / beam_width (beam_width 1 without shared_kv_lens)
  int beam_width = 1;        // beams whose rows share one CTA (and one prefix read)
  int rows_per_request = 0;  // beam_width * q_len * (Hq / Hkv)
  int rows_per_cta = 0;      // 16, 32 or 64
  int row_tiles = 0;         // ceil(rows_per_request / rows_per_cta)
  int num_splits = 1;
  // Kernel configuration: CTAs per SM it is built for (traits.cuh): 3 for D = 128 bf16 over a
  // bf16 cache with <= 32 rows a CTA; else 2. (The two measured within 3% of each other, docs/
  // perf/decode.md run 19; tests set 2 to cover that kernel too.)
  int config = 2;
  int64_t problems = 0;        // requests * Hkv * row_tiles (one semaphore each)
  size_t semaphore_bytes = 0;  // at the workspace's start
  size_t partial_o_offset = 0;
  size_t partial_lse_offset = 0;
  size_t workspace_bytes = 0;  // 0 when num_splits == 1
};

// Which SM count the split heuristic assumes. The workspace size uses the largest Hopper part's
// (132 SMs), so it is a pure host function of the shapes (no device query, valid for any sm_90
// device); the launch takes the heuristic's choice for the device's own SM count, clamped to the
// 132-SM choice (the heuristic is not monotone in the SM count, split_heuristic.hpp).
enum class SmCount { kDevice, kHopperUpperBound };
inline constexpr int kHopperMaxSms = 132;

LaunchPlan plan(const DecodeArgs& args, const DecodeOptions& opts,
                SmCount sm_count = SmCount::kDevice);

// Launches on `stream` (no allocation, no synchronization, one kernel node; CUDA-graph
// capturable). With num_splits > 1 the semaphores at the workspace's start must be zero (the
// caller zeroes a workspace once after allocating it); the kernel's last blocks leave them zero.
void launch(const DecodeArgs& args, const DecodeOptions& opts, const LaunchPlan& plan,
            Stream stream);

}  // namespace hopattn::kernels::decode
