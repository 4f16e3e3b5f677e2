#include "plan/batch_workspace.hpp"

#include <cstdint>

namespace hopattn::plan {
namespace {

constexpr size_t align_up(size_t bytes) {
  return (bytes + kBatchWorkspaceAlign - 1) / kBatchWorkspaceAlign * kBatchWorkspaceAlign;
}

}  // namespace

BatchWorkspaceLayout batch_workspace_layout(const BatchPlanLimits& limits) {
  const BatchPlanCapacity cap = BatchPlanner::capacity(limits);
  BatchWorkspaceLayout w;
  w.plan_bytes = cap.plan_bytes;
  w.partial_o_offset = align_up(w.plan_offset + w.plan_bytes);
  w.partial_o_bytes = cap.partial_o_bytes;
  w.partial_lse_offset = align_up(w.partial_o_offset + w.partial_o_bytes);
  w.partial_lse_bytes = cap.partial_lse_bytes;
  w.semaphore_offset = align_up(w.partial_lse_offset + w.partial_lse_bytes);
  w.semaphore_bytes = static_cast<size_t>(cap.max_merges) * sizeof(int32_t);
  w.total_bytes = align_up(w.semaphore_offset + w.semaphore_bytes);
  return w;
}

}  // namespace hopattn::plan
