// What the batch family's run() needs besides its tensors, as pure host functions of the limits
// (BatchPlanLimits), so that a caller sizes every buffer once, before the first step, in builds
// with or without CUDA:
//   - the plan buffer: host staging that plan() writes (BatchPlanner::workspace_bytes);
//   - the run workspace (device memory for CUDA runs), one allocation in four regions:
//
//     plan_offset         the plan's device copy                   plan buffer bytes
//     partial_o_offset    fp32 partial O rows [max_partial_rows][Dv]
//     partial_lse_offset  fp32 partial LSE [max_partial_rows]
//     semaphore_offset    int32 per merge record (a last-CTA merge), zero once after allocating
//
//   each region aligned to kBatchWorkspaceAlign bytes. No partial row is shared by two items of a
//   plan (batch_plan_layout.hpp), so the partial regions need no clearing between steps.
#pragma once

#include <cstddef>

#include "plan/batch_plan.hpp"
#include "plan/decode_plan.hpp"

namespace hopattn::plan {

// The persistent grid plans are made for unless the caller names one: the largest Hopper part's
// SMs at one CTA each (the kernel is the fwd family's 384-thread CTA with ~225 KB of shared
// memory, one an SM). A plan is a list of work per CTA, so the grid changes only how the work is
// cut, never the result; a smaller part runs the extra CTAs as a second wave.
inline constexpr int kBatchCtasPerSm = 1;
inline constexpr int kBatchDefaultCtas = kHopperMaxSms * kBatchCtasPerSm;

// Region alignment: the plan's records are read with 16-byte loads and partial rows with
// 128-byte lines; 256 keeps every region on its own cache lines.
inline constexpr size_t kBatchWorkspaceAlign = 256;

struct BatchWorkspaceLayout {
  size_t plan_offset = 0, plan_bytes = 0;
  size_t partial_o_offset = 0, partial_o_bytes = 0;
  size_t partial_lse_offset = 0, partial_lse_bytes = 0;
  size_t semaphore_offset = 0, semaphore_bytes = 0;
  size_t total_bytes = 0;
};

// Throws hopattn::Error for limits the planner refuses (BatchPlanner::capacity).
BatchWorkspaceLayout batch_workspace_layout(const BatchPlanLimits& limits);

}  // namespace hopattn::plan
