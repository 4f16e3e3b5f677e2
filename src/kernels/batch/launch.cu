// Host side of the batch family's CUDA path: the step's tensors as one paged varlen fwd call
// (whose parameters and tensor maps fwd::prepare_params builds, GQA packing forced on, so that a
// tile is the planner's packed rows), the plan's work lists in place of the fwd tile scheduler,
// and the merge pass over the plan's merge records.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "hopattn/error.hpp"
#include "kernels/batch/launch.hpp"
#include "kernels/batch/merge.cuh"
#include "kernels/batch/scheduler.cuh"
#include "kernels/batch/side_lane_traits.cuh"
#include "kernels/common/cuda_host.hpp"
#include "kernels/common/programmatic_launch.cuh"
#include "kernels/fwd/configs.cuh"
#include "kernels/fwd/prepare.hpp"
#include "plan/batch_plan_layout.hpp"

namespace hopattn::kernels::batch {

class SideLaneScheduler;

namespace {

constexpr const char* kWhere = "hopattn.BatchAttention.run";

void cuda_ok(cudaError_t err, const char* what) { throw_if_cuda_error(err, kWhere, what); }

[[noreturn]] void unsupported(const std::string& what) {
  throw Error(ErrorKind::kNotImplemented, std::string(kWhere) + " on CUDA: " + what);
}

// The KV cache's scales (real = stored * scale) as the kernel takes them: a per-tensor k scale
// folded into the logits' scale (inside the tanh with a softcap), per-head ones read per tile.
void set_kv_scales(const BatchArgs& a, fwd::FwdParams& p) {
  if (a.k_scale.per_head.defined()) {
    p.kv_scale.k_per_head = a.k_scale.per_head.data_as<const float>();
  } else if (p.softmax.softcap_scale != 0.f) {
    p.softmax.softcap_scale *= a.k_scale.value;
  } else {
    p.softmax.scale_log2 *= a.k_scale.value;
  }
  if (a.v_scale.per_head.defined()) {
    p.kv_scale.v_per_head = a.v_scale.per_head.data_as<const float>();
  } else {
    p.kv_scale.v = a.v_scale.value;
  }
}

// The step as the fwd family sees it: q varlen over cu_seqlens_q, K and V paged through the
// block table.
FwdArgs fwd_args(const BatchArgs& a, const StepLaunch& step) {
  FwdArgs f;
  f.q = a.q;
  f.k = a.k_cache;
  f.v = a.v_cache;
  f.cu_seqlens_q = a.cu_seqlens_q;
  f.max_seqlen_q = step.max_q_len;
  f.max_seqlen_k = step.max_kv_len;
  f.pages.block_table = a.page_table;
  f.pages.kv_lens = a.kv_lens;
  f.sinks = a.sinks;
  f.out = a.out;
  f.lse = a.lse;
  return f;
}

AttentionOptions fwd_options(const BatchAttentionConfig& c) {
  AttentionOptions o = mask_options<AttentionOptions>(c);
  o.pack_gqa = true;  // a work tile is the planner's packed (position, head) rows
  return o;
}

// The side-lane kernel where it is built (16-bit caches, head dims 64 and 128: SideLaneTraits)
// and the page boxes come by TMA (the producer's warps 2 and 3 are idle only then). Returns
// false elsewhere: the plain kernel runs the plan's kDecodeSide items as decode tiles.
template <class Traits>
bool launch_side_lane(const BatchArgs& a, fwd::FwdParams& p, int grid, cudaStream_t stream) {
  if constexpr (kHasSideLane<Traits>) {
    if (p.kv.source != fwd::KVSource::kPagedTma) return false;
    p.batch.q = a.q.data();
    p.batch.q_row_stride = a.q.stride(0);
    p.batch.q_head_stride = a.q.stride(1);
    cuda_ok(fwd::launch_kernel<SideLaneTraits<Traits>, SideLaneScheduler>(p, grid, stream),
            "batch side-lane kernel launch");
    return true;
  } else {
    (void)a, (void)p, (void)grid, (void)stream;
    return false;
  }
}

template <class Traits, class Elt>
void run_config(const BatchArgs& a, const BatchAttentionConfig& c, const StepLaunch& step,
                int device, cudaStream_t stream) {
  FwdArgs f = fwd_args(a, step);
  f.pages.layout = c.kv_layout;
  fwd::LaunchOptions launch;
  launch.paged_tma = step.paged_tma;
  fwd::FwdParams p =
      fwd::prepare_params(f, fwd_options(c), launch, device, Traits::kBlockN, Traits::kBlockM);
  p.status_family = StatusFamily::kBatch;
  set_kv_scales(a, p);
  const auto* plan_bytes = static_cast<const uint8_t*>(step.plan);
  // The grid's KV-head groups are a function of the limits (the planner's, batch_plan_layout.hpp).
  const int group_ctas = step.num_ctas / plan::batch_plan_groups(c.num_kv_heads, step.num_ctas);
  const plan::BatchPlanOffsets offsets = plan::batch_plan_offsets(group_ctas, 0, 0);
  p.batch.header = reinterpret_cast<const plan::BatchPlanHeader*>(plan_bytes);
  p.batch.group_ctas = FastDivisor::of(static_cast<uint32_t>(group_ctas));
  p.batch.cta_offsets = reinterpret_cast<const int32_t*>(plan_bytes + offsets.cta_offsets);
  // The items start right after the CTA offsets (batch_plan_layout.hpp), for any item count.
  p.batch.items = reinterpret_cast<const plan::BatchWorkItem*>(plan_bytes + offsets.items);
  p.batch.partial_o = step.partial_o;
  p.batch.partial_lse = step.partial_lse;
  p.batch.cta_first = step.cta_first;
  p.batch.cta_last = step.cta_last;
  if (step.sm_rank != nullptr) {
    p.batch.sm_rank = step.sm_rank;
    p.batch.claims = step.claims;
    p.batch.placed_sms = step.num_ctas;
    p.batch.decode_sms = step.num_ctas - step.num_ctas / group_ctas * step.placed_lists;
    p.batch.placed_lists = step.placed_lists;
  }
  if (!step.side_lane || !launch_side_lane<Traits>(a, p, step.num_ctas, stream)) {
    cuda_ok(fwd::launch_kernel<Traits, WorkListScheduler>(p, step.num_ctas, stream),
            "batch kernel launch");
  }

  if (!step.has_merges && !stream_is_capturing(reinterpret_cast<Stream>(stream))) return;
  MergeParams m;
  m.plan = plan_bytes;
  m.partial_o = step.partial_o;
  m.partial_lse = step.partial_lse;
  m.sinks = a.sinks.defined() ? a.sinks.data_as<const float>() : nullptr;
  if (a.sinks.defined()) m.sinks_stride = a.sinks.stride(0);
  m.out = a.out.data();
  m.out_row_stride = a.out.stride(0);
  m.out_head_stride = a.out.stride(1);
  m.lse = a.lse.data_as<float>();
  m.lse_row_stride = a.lse.stride(0);
  m.lse_head_stride = a.lse.stride(1);
  m.group = c.num_qo_heads / c.num_kv_heads;
  m.dv = Traits::kHeadDimV;
  // A programmatic dependent of the batch kernel: its blocks start as that kernel's CTAs exit and
  // wait for its completion before they read a partial (merge.cuh).
  cuda_ok(launch_programmatic(merge_kernel<Elt>, dim3(step.num_ctas), dim3(kMergeThreads), 0,
                              stream, m),
          "batch merge launch");
}

}  // namespace

bool stream_is_capturing(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cuda_ok(cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &status),
          "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

void check_supported(const BatchArgs& a, const BatchAttentionConfig& c) {
  const DType kv = a.k_cache.dtype();
  if (kv != a.q.dtype() && kv != DType::kFP8E4M3) {
    unsupported(detail::concat("a ", kv,
                               " KV cache; built: q's dtype (bf16, fp16) and fp8_e4m3 (e5m2 and "
                               "int8 caches run on the CPU)"));
  }
  const int dv = c.head_dim_v != 0 ? c.head_dim_v : c.head_dim;
  if (!fwd::built_for_batch(c.head_dim, dv)) {
    unsupported(detail::concat("head dims (", c.head_dim, ", ", dv,
                               "); built: ", fwd::built_head_dims_string(true)));
  }
  FwdArgs f = fwd_args(a, StepLaunch{});
  f.pages.layout = c.kv_layout;
  f.max_seqlen_q = 1;  // the host bound is the plan's; only its presence is checked
  fwd::check_supported(f, fwd_options(c));
}

void run(const BatchArgs& a, const BatchAttentionConfig& c, const StepLaunch& step, Stream stream) {
  if (step.total_q == 0) return;  // no q token: nothing to write
  const int device = a.q.device().index;
  DeviceGuard guard(device, kWhere);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const int dv = c.head_dim_v != 0 ? c.head_dim_v : c.head_dim;
  fwd::visit_config</*kBatchOnly=*/true>(
      c.head_dim, dv, a.q.dtype(),
      [&](auto config) {
        using Traits = typename decltype(config)::type;
        run_config<Traits, typename Traits::Elt>(a, c, step, device, s);
      },
      a.k_cache.dtype() == DType::kFP8E4M3);
}

}  // namespace hopattn::kernels::batch
