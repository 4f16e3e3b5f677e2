// What a BatchAttention holds (the public class is a handle to it): the planner and every buffer
// plan() and CPU runs use, all sized from the limits in the constructor (batch_attention.cpp),
// and the step of the last successful plan(), which run() (dispatch.cpp) checks against.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "api/validate.hpp"
#include "hopattn/batch.hpp"
#include "plan/batch_plan.hpp"
#include "plan/batch_workspace.hpp"

namespace hopattn {
namespace kernels::batch {
class PlanStaging;  // CUDA builds: pinned double-buffered plan staging (plan_staging.hpp)
class SideStream;   // CUDA builds: the concurrent form's decode stream (side_stream.hpp)
class SmPlacement;  // CUDA builds: the concurrent form's SM order (sm_placement.hpp)
}  // namespace kernels::batch

struct BatchAttention::Impl {
  explicit Impl(const BatchAttentionConfig& config);

  // The lengths of one step, contiguous (the planner's input, and run()'s reference values).
  struct Lengths {
    std::vector<int32_t> cu_seqlens_q;  // max_batch + 1
    std::vector<int32_t> kv_lens;       // max_batch
  };

  // Plans the step held in `staged` into `buffer`; on success it becomes the current step.
  void plan_staged(int batch, void* buffer, size_t bytes);
  // The same into the pinned staging (CUDA builds), then its upload into `workspace` on
  // `stream`.
  void plan_pinned(int batch, const Workspace& workspace, Stream stream);
  // Copies the current plan into `workspace` on `stream` (through the staging when a plain
  // plan() left it in pageable memory); run() calls it when the workspace does not hold it yet.
  void upload(const Workspace& workspace, Stream stream);
  void ensure_staging();
  validate::BatchPlanned planned_step() const;

  BatchAttentionConfig config;
  plan::BatchPlanLimits limits;
  plan::BatchPlanner planner;
  plan::BatchWorkspaceLayout layout;  // run()'s workspace regions, from the limits
  size_t workspace_bytes = 0;         // run()'s workspace on CUDA (0 on CPU)
  // kernels::fwd::LaunchOptions::paged_tma for run()'s launch (BatchAttentionVariants::
  // paged_tma; hopattn bench batch --paged-tma off): false sends every page through the gather.
  bool paged_tma = true;
  // The concurrent form's decode kernel (BatchAttentionVariants::concurrent_decode_kernel; hopattn
  // bench batch --decode-kernel): kNarrow where a run's call takes it (else the decode family's
  // choice), kAuto the decode family's choice.
  DecodeKernel concurrent_decode_kernel = DecodeKernel::kAuto;

  Lengths current, staged;  // staged is filled by plan() and swapped in when the planner accepts
  int max_kv_len = 0;
  int max_q_len = 0;
  BatchPlanSummary summary;
  // The current plan's concurrent form (prefill_ctas 0: none): its prefill plan sits
  // concurrent.plan_offset bytes into the plan, and run() hands its decode runs to the decode
  // family on `side` unless the stream is being captured.
  plan::BatchConcurrentForm concurrent;

  std::vector<unsigned char> own_plan;  // the object's plan buffer (plus alignment slack)
  unsigned char* own_plan_aligned = nullptr;
  const unsigned char* plan = nullptr;  // where the current plan lives (own or the caller's)

  // CUDA: where the current plan was uploaded (the workspace's base), or null when it is not in
  // device memory yet (run() then uploads it to its workspace first). The pinned staging is made
  // by the first upload, so that a CUDA object's pure host calls touch no device.
  // Deletes an object of a class defined in CUDA builds only (batch_attention.cpp).
  template <class T>
  struct CudaDeleter {
    void operator()(T* object) const;
  };
  std::unique_ptr<kernels::batch::PlanStaging, CudaDeleter<kernels::batch::PlanStaging>> staging;
  // made with the staging
  std::unique_ptr<kernels::batch::SideStream, CudaDeleter<kernels::batch::SideStream>> side;
  // The concurrent form's SM order (BatchAttentionVariants::concurrent_sm_order), or none.
  std::unique_ptr<kernels::batch::SmPlacement, CudaDeleter<kernels::batch::SmPlacement>> placement;
  const void* uploaded_to = nullptr;

  // CPU runs: the split items' partial states, sized for the planner's worst case. Allocated
  // uninitialized, so pages no plan reaches are never touched.
  std::unique_ptr<float[]> partial_o;
  std::unique_ptr<float[]> partial_lse;
};

}  // namespace hopattn
