// The problem a row of the table runs: the tour's default model shapes (Llama-3-8B and
// DeepSeek-V3 MLA), their short CPU variants, the command-line overrides, and the operation and
// byte counts the rate column divides by.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "hopattn/dtype.hpp"
#include "hopattn/options.hpp"
#include "kernels/bwd/launch.hpp"
#include "kernels/fwd/launch.hpp"
#include "step.hpp"

namespace hopattn::cli {

struct Shape {
  Family family = Family::kFwd;
  int batch = 1;
  int q_len = 1;   // per request; merge: tokens = batch * q_len
  int kv_len = 1;  // per request (decode: includes the q_len new tokens)
  int q_heads = 32;
  int kv_heads = 8;
  int head_dim = 128;  // Dqk; mla: 512 latent + 64 rope, whatever this says
  int head_dim_v = 0;  // Dv of fwd and bwd (--head-dim DQK:DV); 0 = head_dim. Read it as dv()
  int page_size = 0;   // 0 = contiguous KV (fwd, bwd); decode and mla are always paged
  DType dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;  // decode, mla, batch (and fwd: q's)
  bool causal = false;
  Window window{};
  float softcap = 0.f;
  bool deterministic = false;    // bwd: bitwise reproducible dQ (a row of its own in `bench bwd`)
  std::optional<bool> pack_gqa;  // fwd: AttentionOptions::pack_gqa (unset: the kernel decides)
  int num_splits = 0;            // decode, mla: key splits (--splits; 0 = the library's choice)
  MlaSchedule mla_schedule = MlaSchedule::kAuto;     // mla: --mla-schedule
  DecodeKernel decode_kernel = DecodeKernel::kAuto;  // decode: --decode-kernel
  KVLayout kv_layout = KVLayout::kNHD;               // decode: --kv-layout
  bool pages_in_order = false;  // paged pools: each request's pages in order (--page-order)
  // Launch variants of the GPU kernels (--paged-tma, --bwd-order); defaults: the library's.
  kernels::fwd::LaunchOptions fwd_launch;
  kernels::bwd::LaunchOptions bwd_launch;
  // batch: the step (its requests replace batch, q_len and kv_len) and who computes it.
  Step step;
  BatchImpl batch_impl = BatchImpl::kBatch;
  int batch_ctas = 0;  // batch: the persistent grid (--batch-ctas; 0 = the library's)
  // batch: decodes spread between prefill items (--batch-order), small decodes on the side lane
  // (--batch-side); kAuto: the planner's choice per step.
  plan::BatchOverlap batch_spread = plan::BatchOverlap::kAuto;
  plan::BatchOverlap batch_side = plan::BatchOverlap::kAuto;
  plan::BatchOverlap batch_concurrent = plan::BatchOverlap::kAuto;  // --batch-concurrent
  int batch_concurrent_rate_milli = plan::BatchPlanLimits{}.concurrent_rate_milli;
  int batch_concurrent_ctas = 0;        // --batch-concurrent-ctas (0: the planner's modelled split)
  int batch_concurrent_tail_milli = 0;  // --batch-concurrent-tail (0: off)
  // The concurrent form's SM order, decodes' SMs first (--decode-sm-order; empty: the hardware's
  // placement).
  std::vector<int> decode_sm_order;
  bool decode_sm_gpc = false;  // --decode-sm-order gpc: the order from the card's GPCs
  int64_t batch_side_cost = plan::kSideLaneCost;  // the planner's side-lane factor
  bool batch_sections = true;  // the prefill works in L2 sections (--batch-sections)
  // batch: prefill and decode works on separate CTAs (--batch-order partition), the split from
  // a decode CTA's rate (--batch-decode-rate; plan::BatchPlanLimits::partition_decodes).
  plan::BatchOverlap batch_partition = plan::BatchOverlap::kAuto;
  int batch_decode_rate_milli = plan::BatchPlanLimits{}.decode_cta_rate_milli;
  int batch_partition_ctas = 0;  // --batch-partition-ctas (0: the planner's modelled split)

  int dv() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  // "B=2 Sq=4096 Sk=4096 H=32/8 D=128 causal bf16"; Dqk != Dv prints "D=192/128".
  std::string describe() const;
};

// The tour's shape of a family on a GPU (model-sized) or on the CPU (same heads, short).
Shape model_shape(Family f);
Shape cpu_shape(Family f);
// `base` with the user's flags applied; a flag the family does not take raises UsageError.
Shape apply_flags(Shape base, const BenchFlags& flags);

// Keys each query row sees, summed over the batch (causal and window as in DESIGN.md).
double visible_pairs(const Shape& s);

enum class Metric { kFlops, kBytes };
// fwd, bwd and MLA prefill are compute-bound (FLOP/s); decode, MLA decode and merge move bytes;
// a batch step is FLOP/s unless it is decodes only.
Metric metric(const Shape& s);
// The operations (multiply and add = 2) of the attention math over the visible pairs.
double flops(const Shape& s);
// The fewest bytes the operation moves through device memory: inputs once, outputs once.
double bytes(const Shape& s);

}  // namespace hopattn::cli
