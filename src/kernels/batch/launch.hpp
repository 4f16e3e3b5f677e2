// Host entry of the batch family's kernels (no CUDA headers: included by src/api). The
// definitions exist only in CUDA builds (HOPATTN_WITH_CUDA). Arguments must have passed
// validate::batch_run; the plan must already be in device memory (plan_staging.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "hopattn/batch.hpp"
#include "hopattn/options.hpp"

namespace hopattn::kernels::batch {

// What a launch needs besides the tensors: where the plan and the partial states live on the
// device, and host facts of the planned step (no device read).
struct StepLaunch {
  const void* plan = nullptr;  // the plan's device copy (workspace plan region)
  float* partial_o = nullptr;  // fp32 [max_partial_rows][Dv]
  float* partial_lse = nullptr;
  int num_ctas = 0;  // the grid the plan was made for
  // The CTAs of each group whose lists this launch runs (the concurrent form's tail runs its
  // prefill plan in two launches; BatchWorkParams::cta_first).
  int cta_first = 0, cta_last = 1 << 30;
  int max_q_len = 0;  // the step's longest request, in q tokens and in keys
  int max_kv_len = 0;
  int total_q = 0;
  // The plan has kDecodeSide items (BatchPlanLimits::side_decodes): the side-lane kernel runs
  // them on producer warps 2 and 3 beside the consumers' tiles (side_lane.cuh) where it is built,
  // the plain kernel as decode tiles elsewhere. Either kernel runs any plan correctly, so a
  // captured graph stays correct when a replayed plan has side items or none.
  bool side_lane = false;
  bool has_merges = false;  // the plan split some rows (the merge pass runs regardless while a
                            // CUDA graph is being captured: a replay may bring a plan that does)
  // kernels::fwd::LaunchOptions::paged_tma: false loads every page through the cp.async gather
  // (a launch variant for the benchmark; the public API keeps TMA where it serves).
  bool paged_tma = true;
  // A placed launch (placement.cuh; sm_placement.hpp) where sm_rank is set: the SM order's
  // ranks and claims, over a grid of num_ctas CTAs on as many SMs, `placed_lists` prefill lists
  // a group.
  const int16_t* sm_rank = nullptr;
  uint32_t* claims = nullptr;
  int placed_lists = 0;
};

// The configuration's mask and logit options (causal, window, softcap, scale), in the fwd
// family's or decode's options struct: the batch launch's fwd call and the concurrent form's
// decode calls (src/api/batch_concurrent.cpp).
template <class Options>
Options mask_options(const BatchAttentionConfig& c) {
  Options o;
  o.causal = c.causal;
  o.window = c.window;
  o.softcap = c.softcap;
  o.scale = c.scale;
  return o;
}

// Throws hopattn::Error(kNotImplemented) naming the first feature of the call the CUDA kernel
// does not provide (8-bit caches, scales other than 1, head dims other than 64 / 128 / 256).
void check_supported(const BatchArgs& args, const BatchAttentionConfig& config);

// The persistent work-list launch of the fwd kernel, then the merge pass (when needed), on
// `stream`. No allocation, no sync.
void run(const BatchArgs& args, const BatchAttentionConfig& config, const StepLaunch& step,
         Stream stream);

// Whether `stream` is being captured into a CUDA graph (run() must not enqueue a host-to-device
// copy from pageable memory then).
bool stream_is_capturing(Stream stream);

}  // namespace hopattn::kernels::batch
