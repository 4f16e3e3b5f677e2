// BatchAttention: the configuration checked and turned into planner limits, the buffers sized
// from them, and plan(). run() is dispatched with the other families (dispatch.cpp).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "api/batch_state.hpp"
#include "api/launch_variants.hpp"
#include "api/validate.hpp"
#include "hopattn/error.hpp"
#include "plan/batch_workspace.hpp"
#include "reference/kv_locator.hpp"

#ifdef HOPATTN_WITH_CUDA
#include "kernels/batch/plan_staging.hpp"
#include "kernels/batch/side_stream.hpp"
#include "kernels/batch/sm_placement.hpp"
#endif

namespace hopattn {
namespace {

plan::BatchPlanLimits limits_of(const BatchAttentionConfig& c) {
  validate::batch_config(c);
  plan::BatchPlanLimits l;
  l.max_batch = c.max_batch;
  l.max_tokens = c.max_tokens;
  l.num_qo_heads = c.num_qo_heads;
  l.num_kv_heads = c.num_kv_heads;
  l.head_dim = c.head_dim;
  l.head_dim_v = c.head_dim_v;
  l.page_size = c.page_size;
  l.causal = c.causal;
  l.window = c.window;
  l.num_ctas = c.num_ctas != 0 ? c.num_ctas : plan::kBatchDefaultCtas;
  l.l2_bytes = plan::kBatchL2Bytes;
  return l;
}

}  // namespace

// ----------------------------------------------------------------------------- Impl

BatchAttention::Impl::Impl(const BatchAttentionConfig& c)
    : config(c), limits(limits_of(c)), planner(limits) {
  layout = plan::batch_workspace_layout(limits);
  workspace_bytes = c.device.is_cuda() ? layout.total_bytes : 0;
  const size_t lengths = static_cast<size_t>(limits.max_batch);
  for (Lengths* l : {&current, &staged}) {
    l->cu_seqlens_q.assign(lengths + 1, 0);
    l->kv_lens.assign(lengths, 0);
  }
  own_plan.resize(layout.plan_bytes + plan::kBatchPlanAlign);
  const uintptr_t p = reinterpret_cast<uintptr_t>(own_plan.data());
  own_plan_aligned =
      own_plan.data() + (plan::kBatchPlanAlign - p % plan::kBatchPlanAlign) % plan::kBatchPlanAlign;
  if (!c.device.is_cuda()) {
    const plan::BatchPlanCapacity& cap = planner.capacity();
    partial_o.reset(new float[cap.partial_o_bytes / sizeof(float)]);
    partial_lse.reset(new float[cap.partial_lse_bytes / sizeof(float)]);
  }
}

template <class T>
void BatchAttention::Impl::CudaDeleter<T>::operator()(T* object) const {
#ifdef HOPATTN_WITH_CUDA
  delete object;
#else
  (void)object;  // never made without CUDA kernels
#endif
}
template struct BatchAttention::Impl::CudaDeleter<kernels::batch::PlanStaging>;
template struct BatchAttention::Impl::CudaDeleter<kernels::batch::SideStream>;
template struct BatchAttention::Impl::CudaDeleter<kernels::batch::SmPlacement>;

void BatchAttention::Impl::plan_staged(int batch, void* buffer, size_t bytes) {
  const plan::BatchPlanInfo info =
      planner.plan(staged.cu_seqlens_q.data(), staged.kv_lens.data(), batch, buffer, bytes);
  std::swap(current, staged);  // vectors of the same sizes: no allocation
  max_kv_len = 0;
  max_q_len = 0;
  for (int b = 0; b < batch; ++b) {
    max_kv_len = std::max(max_kv_len, current.kv_lens[b]);
    max_q_len = std::max(max_q_len, current.cu_seqlens_q[b + 1] - current.cu_seqlens_q[b]);
  }
  uploaded_to = nullptr;
  plan = static_cast<const unsigned char*>(buffer);
  summary.batch = batch;
  summary.total_q = current.cu_seqlens_q[batch];
  summary.num_items = info.num_items;
  summary.num_merges = info.num_merges;
  summary.num_splits_max = info.num_splits_max;
  // The upload copies the concurrent form's plan too, where there is one.
  summary.plan_bytes = std::max(info.used_bytes, info.concurrent.plan_end);
  summary.decodes_spread = info.decodes_spread;
  summary.partition_ctas = info.partition_ctas;
  summary.num_side_items = info.num_side_items;
  summary.concurrent_ctas = info.concurrent.prefill_ctas;
  summary.concurrent_tail = info.concurrent.tail;
  concurrent = info.concurrent;
}

// Made on first use, so that making a CUDA BatchAttention (and every pure host call on it:
// sizes, plain plan()) touches no device.
void BatchAttention::Impl::ensure_staging() {
#ifdef HOPATTN_WITH_CUDA
  if (staging == nullptr) {
    const size_t bytes = layout.plan_bytes;
    staging.reset(new kernels::batch::PlanStaging(bytes, config.device.index));
    // The card is known now: the concurrent form's model scales with its HBM (plans made before,
    // by plain plan() calls, used the model's own card).
    limits.hbm_gbps = kernels::batch::card_hbm_gbps(config.device.index);
    planner.set_hbm_gbps(limits.hbm_gbps);
  }
  if (side == nullptr && limits.concurrent_decodes != plan::BatchOverlap::kOff) {
    side.reset(new kernels::batch::SideStream(config.device.index));
  }
#endif
}

void BatchAttention::Impl::plan_pinned(int batch, const Workspace& workspace, Stream stream) {
#ifdef HOPATTN_WITH_CUDA
  ensure_staging();
  plan_staged(batch, staging->next(), layout.plan_bytes);
  staging->commit();
  upload(workspace, stream);
#else
  (void)batch, (void)workspace, (void)stream;
#endif
}

void BatchAttention::Impl::upload(const Workspace& workspace, Stream stream) {
#ifdef HOPATTN_WITH_CUDA
  ensure_staging();
  if (plan != staging->current()) {
    // A plain plan() left the plan in pageable memory: stage it (what the copy reads must stay
    // put until the copy has run, which the staging's events track).
    std::memcpy(staging->next(), plan, summary.plan_bytes);
    staging->commit();
    plan = static_cast<const unsigned char*>(staging->current());
  }
  staging->upload(static_cast<unsigned char*>(workspace.data) + layout.plan_offset,
                  summary.plan_bytes, stream);
  uploaded_to = workspace.data;
#else
  (void)workspace, (void)stream;
#endif
}

validate::BatchPlanned BatchAttention::Impl::planned_step() const {
  validate::BatchPlanned p;
  p.batch = summary.batch;
  p.cu_seqlens_q = current.cu_seqlens_q.data();
  p.kv_lens = current.kv_lens.data();
  p.max_kv_len = max_kv_len;
  return p;
}

// ----------------------------------------------------------------------------- BatchAttention

BatchAttention::BatchAttention(const BatchAttentionConfig& config)
    : impl_(std::make_unique<Impl>(config)) {}
BatchAttention::~BatchAttention() = default;
BatchAttention::BatchAttention(BatchAttention&&) noexcept = default;
BatchAttention& BatchAttention::operator=(BatchAttention&&) noexcept = default;

size_t BatchAttention::plan_buffer_size(const BatchAttentionConfig& config) {
  return plan::BatchPlanner::workspace_bytes(limits_of(config));
}

size_t BatchAttention::workspace_size(const BatchAttentionConfig& config) {
  const plan::BatchWorkspaceLayout layout = plan::batch_workspace_layout(limits_of(config));
  return config.device.is_cuda() ? layout.total_bytes : 0;
}

size_t BatchAttention::plan_buffer_size() const { return impl_->layout.plan_bytes; }
size_t BatchAttention::workspace_size() const { return impl_->workspace_bytes; }

const BatchAttentionConfig& BatchAttention::config() const { return impl_->config; }
const BatchPlanSummary& BatchAttention::planned() const { return impl_->summary; }

void BatchAttention::plan(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch) {
  plan(cu_seqlens_q, kv_lens, batch, impl_->own_plan_aligned, plan_buffer_size());
}

void BatchAttention::plan(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch,
                          Workspace workspace, Stream stream) {
  check_upload_target(workspace);
  plan_lengths(cu_seqlens_q, kv_lens, batch);
  impl_->plan_pinned(batch, workspace, stream);
}

void BatchAttention::plan(const TensorView& cu_seqlens_q, const TensorView& kv_lens,
                          Workspace workspace, Stream stream) {
  check_upload_target(workspace);
  const int batch = stage_lengths(cu_seqlens_q, kv_lens);
  impl_->plan_pinned(batch, workspace, stream);
}

void BatchAttention::plan(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch,
                          void* plan_buffer, size_t plan_buffer_bytes) {
  // Copies at most max_batch lengths; a larger or negative batch, or missing arrays, reach the
  // planner, which names them.
  plan_lengths(cu_seqlens_q, kv_lens, batch);
  impl_->plan_staged(batch, plan_buffer, plan_buffer_bytes);
}

void BatchAttention::plan(const TensorView& cu_seqlens_q, const TensorView& kv_lens) {
  plan(cu_seqlens_q, kv_lens, impl_->own_plan_aligned, plan_buffer_size());
}

void BatchAttention::plan(const TensorView& cu_seqlens_q, const TensorView& kv_lens,
                          void* plan_buffer, size_t plan_buffer_bytes) {
  const int batch = stage_lengths(cu_seqlens_q, kv_lens);
  impl_->plan_staged(batch, plan_buffer, plan_buffer_bytes);
}

int BatchAttention::stage_lengths(const TensorView& cu_seqlens_q, const TensorView& kv_lens) {
  validate::batch_plan(cu_seqlens_q, kv_lens);
  Impl& s = *impl_;
  const int64_t batch = kv_lens.size(0);
  if (batch > s.limits.max_batch) {
    // The planner's message, from a batch it rejects before reading any length.
    const int64_t shown = std::min<int64_t>(batch, std::numeric_limits<int32_t>::max());
    s.planner.plan(nullptr, nullptr, static_cast<int>(shown), s.own_plan_aligned,
                   plan_buffer_size());
  }
  for (int64_t i = 0; i <= batch; ++i) {
    s.staged.cu_seqlens_q[i] = static_cast<int32_t>(reference::index_at(cu_seqlens_q, i));
  }
  for (int64_t b = 0; b < batch; ++b) {
    s.staged.kv_lens[b] = static_cast<int32_t>(reference::index_at(kv_lens, b));
  }
  return static_cast<int>(batch);
}

// A plan() that uploads: a CUDA configuration of a CUDA build, and a workspace of
// workspace_size() bytes.
void BatchAttention::check_upload_target(const Workspace& workspace) const {
  const Impl& s = *impl_;
  if (!s.config.device.is_cuda()) {
    throw Error(ErrorKind::kValue,
                detail::concat("hopattn.BatchAttention.plan: workspace: expected no workspace "
                               "(it is the device copy of a CUDA plan; this BatchAttention is for ",
                               s.config.device, "), got one"));
  }
#ifndef HOPATTN_WITH_CUDA
  throw Error(ErrorKind::kNotImplemented,
              "hopattn.BatchAttention.plan: this build of hopattn has no CUDA kernels");
#endif
  if (workspace.data == nullptr || workspace.bytes < s.workspace_bytes) {
    throw Error(ErrorKind::kValue,
                detail::concat("hopattn.BatchAttention.plan: workspace: expected at least ",
                               s.workspace_bytes, " bytes (workspace_size()), got ",
                               workspace.data == nullptr ? size_t{0} : workspace.bytes,
                               workspace.data == nullptr ? " (null)" : ""));
  }
}

// Copies the host lengths of a pointer plan() into the staging arrays (the planner names bad
// arrays itself).
void BatchAttention::plan_lengths(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch) {
  Impl& s = *impl_;
  const bool fits = batch >= 0 && batch <= s.limits.max_batch;
  const bool readable = cu_seqlens_q != nullptr && (batch == 0 || kv_lens != nullptr);
  if (!fits || !readable) {
    s.planner.plan(cu_seqlens_q, kv_lens, batch, s.own_plan_aligned, plan_buffer_size());
    throw Error(ErrorKind::kRuntime,  // unreachable unless the planner misses a check
                "hopattn.BatchAttention.plan: the planner accepted arrays it could not read");
  }
  std::copy(cu_seqlens_q, cu_seqlens_q + batch + 1, s.staged.cu_seqlens_q.begin());
  std::copy(kv_lens, kv_lens + batch, s.staged.kv_lens.begin());
}

namespace internal {

// The object's planner remade with one of the planner's variant fields set to `value`.
template <class T>
void BatchAttentionVariants::set_limit(BatchAttention& attention, T plan::BatchPlanLimits::*field,
                                       T value) {
  BatchAttention::Impl& impl = *attention.impl_;
  if (impl.limits.*field == value) return;
  impl.limits.*field = value;
  impl.planner = plan::BatchPlanner(impl.limits);
}

void BatchAttentionVariants::spread_decodes(BatchAttention& attention, plan::BatchOverlap mode) {
  set_limit(attention, &plan::BatchPlanLimits::spread_decodes, mode);
}

void BatchAttentionVariants::side_decodes(BatchAttention& attention, plan::BatchOverlap mode) {
  set_limit(attention, &plan::BatchPlanLimits::side_decodes, mode);
}

void BatchAttentionVariants::side_lane_cost(BatchAttention& attention, int64_t cost) {
  set_limit(attention, &plan::BatchPlanLimits::side_lane_cost, cost);
}

void BatchAttentionVariants::l2_sections(BatchAttention& attention, bool on) {
  set_limit(attention, &plan::BatchPlanLimits::l2_bytes, on ? plan::kBatchL2Bytes : int64_t{0});
}

void BatchAttentionVariants::concurrent_decodes(BatchAttention& attention, plan::BatchOverlap mode,
                                                int rate_milli, int prefill_ctas) {
  set_limit(attention, &plan::BatchPlanLimits::concurrent_decodes, mode);
  set_limit(attention, &plan::BatchPlanLimits::concurrent_rate_milli, rate_milli);
  set_limit(attention, &plan::BatchPlanLimits::concurrent_ctas, prefill_ctas);
}

void BatchAttentionVariants::paged_tma(BatchAttention& attention, bool on) {
  attention.impl_->paged_tma = on;
}

void BatchAttentionVariants::concurrent_tail(BatchAttention& attention, int tail_milli) {
  set_limit(attention, &plan::BatchPlanLimits::concurrent_tail_milli, tail_milli);
}

void BatchAttentionVariants::concurrent_decode_kernel(BatchAttention& attention,
                                                      DecodeKernel kernel) {
  attention.impl_->concurrent_decode_kernel = kernel;
}

void BatchAttentionVariants::concurrent_sm_order(BatchAttention& attention,
                                                 const std::vector<int>& order) {
  if (order.empty()) {
    attention.impl_->placement.reset();
  } else {
    set_placement(attention, &order);
  }
}

void BatchAttentionVariants::concurrent_sm_spread(BatchAttention& attention) {
  set_placement(attention, nullptr);
}

void BatchAttentionVariants::set_placement(BatchAttention& attention,
                                           const std::vector<int>* order) {
#ifdef HOPATTN_WITH_CUDA
  BatchAttention::Impl& impl = *attention.impl_;
  const int device = impl.config.device.index;
  impl.placement.reset(order != nullptr ? new kernels::batch::SmPlacement(device, *order)
                                        : new kernels::batch::SmPlacement(device));
#else
  (void)attention, (void)order;
  throw Error(ErrorKind::kNotImplemented,
              "hopattn.BatchAttention: an SM order needs a build with CUDA kernels");
#endif
}

const kernels::batch::SmPlacement* BatchAttentionVariants::concurrent_sm_placement(
    const BatchAttention& attention) {
  return attention.impl_->placement.get();
}

void BatchAttentionVariants::partition_decodes(BatchAttention& attention, plan::BatchOverlap mode,
                                               int decode_cta_rate_milli, int partition_ctas) {
  set_limit(attention, &plan::BatchPlanLimits::partition_decodes, mode);
  set_limit(attention, &plan::BatchPlanLimits::decode_cta_rate_milli, decode_cta_rate_milli);
  set_limit(attention, &plan::BatchPlanLimits::partition_ctas, partition_ctas);
}

}  // namespace internal
}  // namespace hopattn
