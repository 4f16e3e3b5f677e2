// fwd and bwd entry points with the kernels' launch variants explicit, and BatchAttention's
// planner variants: what the benchmark calls to time a variant against the default (hopattn bench
// fwd --paged-tma off, bench bwd --bwd-order heads, bench batch --batch-order spread). The public
// attention_fwd / attention_bwd are these with default LaunchOptions: the library never picks a
// variant itself and reads no environment. CPU tensors ignore the options.
#pragma once

#include <vector>

#include "hopattn/batch.hpp"
#include "hopattn/options.hpp"
#include "kernels/bwd/launch.hpp"
#include "kernels/fwd/launch.hpp"
#include "plan/batch_plan.hpp"

namespace hopattn::kernels::batch {
class SmPlacement;  // CUDA builds: the concurrent form's SM order (sm_placement.hpp)
}  // namespace hopattn::kernels::batch

namespace hopattn::internal {

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts, Stream stream,
                   const kernels::fwd::LaunchOptions& launch);
void attention_bwd(const BwdArgs& args, const AttentionOptions& opts, Stream stream,
                   const kernels::bwd::LaunchOptions& launch);

// BatchAttention's planner variants (hopattn bench batch --batch-order, --batch-side,
// --batch-side-cost, --batch-decode-rate, --batch-partition-ctas, --batch-sections): the
// object's planner remade with plan::BatchPlanLimits::spread_decodes, side_decodes,
// side_lane_cost, partition_decodes, decode_cta_rate_milli and partition_ctas or l2_bytes set,
// before its first plan().
struct BatchAttentionVariants {
  static void spread_decodes(BatchAttention& attention, plan::BatchOverlap mode);
  static void side_decodes(BatchAttention& attention, plan::BatchOverlap mode);
  static void side_lane_cost(BatchAttention& attention, int64_t cost);
  // The prefill sections: l2_bytes plan::kBatchL2Bytes (on, the default) or 0.
  static void l2_sections(BatchAttention& attention, bool on);
  // partition_ctas: plan::BatchPlanLimits::partition_ctas (0: the modelled split).
  static void partition_decodes(BatchAttention& attention, plan::BatchOverlap mode,
                                int decode_cta_rate_milli, int partition_ctas = 0);
  // plan::BatchPlanLimits::concurrent_decodes, concurrent_rate_milli, concurrent_ctas.
  static void concurrent_decodes(BatchAttention& attention, plan::BatchOverlap mode, int rate_milli,
                                 int prefill_ctas = 0);
  // run()'s kernels::fwd::LaunchOptions::paged_tma (hopattn bench batch --paged-tma off).
  static void paged_tma(BatchAttention& attention, bool on);
  // plan::BatchPlanLimits::concurrent_tail_milli (hopattn bench batch --batch-concurrent-tail).
  static void concurrent_tail(BatchAttention& attention, int tail_milli);
  // The concurrent form's decode kernel (hopattn bench batch --decode-kernel): kNarrow where a
  // decode run's call takes it, else the decode family's choice (kAuto).
  static void concurrent_decode_kernel(BatchAttention& attention, DecodeKernel kernel);
  // The concurrent form's SM order (hopattn bench batch --decode-sm-order; kernels/batch/
  // sm_placement.hpp): the decodes get its first SMs, the prefill CTAs claim the others. Each of
  // the card's SM ids once (hopattn::Error otherwise); empty: the hardware's placement (the
  // default). CUDA builds only.
  static void concurrent_sm_order(BatchAttention& attention, const std::vector<int>& order);
  // The same with the order from the card's GPCs, the decodes' SMs spread over them (hopattn
  // bench batch --decode-sm-order gpc; probed on the device by the first placed run).
  static void concurrent_sm_spread(BatchAttention& attention);
  // The SM order (its ranks and claim words on the device, as the last placed run left them),
  // or null without one. For the GPU tests.
  static const kernels::batch::SmPlacement* concurrent_sm_placement(
      const BatchAttention& attention);

 private:
  template <class T>
  static void set_limit(BatchAttention& attention, T plan::BatchPlanLimits::*field, T value);
  // The given order, or (null) the GPC probe's.
  static void set_placement(BatchAttention& attention, const std::vector<int>* order);
};

}  // namespace hopattn::internal
