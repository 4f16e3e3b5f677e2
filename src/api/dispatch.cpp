// Public entry points: validate, then route CPU tensors to the reference and CUDA tensors to the
// GPU kernels. A family without a GPU kernel yet raises kNotImplemented for CUDA tensors.
#include "api/batch_concurrent.hpp"
#include "api/batch_state.hpp"
#include "api/debug_mode.hpp"
#include "api/launch_variants.hpp"
#include "api/validate.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "kernels/batch/launch.hpp"
#include "kernels/batch/side_stream.hpp"
#include "kernels/batch/sm_placement.hpp"
#include "kernels/bwd/launch.hpp"
#include "kernels/decode/launch.hpp"
#include "kernels/fwd/launch.hpp"
#include "kernels/merge/launch.hpp"
#include "kernels/mla/launch.hpp"
#include "plan/decode_plan.hpp"
#include "plan/mla_plan.hpp"
#include "reference/reference.hpp"

namespace hopattn {
namespace {

// `entry`: the entry point ("decode"); `family`: how the message names its family.
[[noreturn, maybe_unused]] void no_gpu_kernel(const char* entry,
                                              const char* family = "this family") {
  throw Error(ErrorKind::kNotImplemented,
              detail::concat("hopattn.", entry, ": expected CPU tensors (no GPU kernel for ",
                             family, " yet), got CUDA tensors"));
}

// Runs `gpu` (a call into the GPU kernels) in a CUDA build; in a build without CUDA, raises
// kNotImplemented for `entry` (gpu's body then never runs nor links).
template <class Gpu>
void run_gpu(const char* entry, const Gpu& gpu) {
#ifdef HOPATTN_WITH_CUDA
  (void)entry;  // named only where the build has no GPU kernels
  gpu();
#else
  (void)gpu;
  no_gpu_kernel(entry);
#endif
}

}  // namespace

namespace internal {

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts, Stream stream,
                   const kernels::fwd::LaunchOptions& launch) {
  validate::attention_fwd(args, opts);
  if (args.q.is_cuda()) {
    return run_gpu("attention_fwd", [&] {
      if (debug::enabled()) debug::check_device_values(args, opts, stream);
      kernels::fwd::run(args, opts, stream, launch);
    });
  }
  reference::attention_fwd(args, opts);
}

void attention_bwd(const BwdArgs& args, const AttentionOptions& opts, Stream stream,
                   const kernels::bwd::LaunchOptions& launch) {
  validate::attention_bwd(args, opts);
  if (args.fwd.q.is_cuda()) {
    return run_gpu("attention_bwd", [&] {
      if (debug::enabled()) debug::check_device_values(args, opts, stream);
      kernels::bwd::run(args, opts, stream, launch);
    });
  }
  reference::attention_bwd(args, opts);
}

}  // namespace internal

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts, Stream stream) {
  internal::attention_fwd(args, opts, stream, {});
}

// Pure host function of the shapes (no CUDA call, also in builds without CUDA): the validator
// and the Python support probes call it too, so it must not validate or read tensor data.
size_t attention_bwd_workspace_size(const BwdArgs& args, const AttentionOptions&) {
  if (!args.fwd.q.is_cuda()) return 0;
  return kernels::bwd::workspace_size(args);
}

void attention_bwd(const BwdArgs& args, const AttentionOptions& opts, Stream stream) {
  internal::attention_bwd(args, opts, stream, {});
}

// Pure host function of the shapes (no CUDA call, also in builds without CUDA; sized for the
// largest Hopper part, plan/decode_plan.hpp): the validator and the Python support probes call it
// too, so it must not validate or read tensor data.
size_t decode_workspace_size(const DecodeArgs& args, const DecodeOptions& opts) {
  if (!args.q.is_cuda()) return 0;
  return plan::decode_workspace_bytes(args, opts);
}

void decode(const DecodeArgs& args, const DecodeOptions& opts, Stream stream) {
  validate::decode(args, opts);
  if (args.q.is_cuda()) {
    return run_gpu("decode", [&] {
      if (debug::enabled()) debug::check_device_values(args, opts, stream);
      kernels::decode::launch(args, opts, kernels::decode::device_plan(args, opts), stream);
    });
  }
  reference::decode(args, opts);
}

// Pure host function of the shapes (also in builds without CUDA): the validator calls it too.
size_t mla_workspace_size(const MlaArgs& args, const MlaOptions& opts) {
  if (!args.q_nope.is_cuda()) return 0;
  return plan::mla::make_plan(plan::mla::shape_of(args, opts), plan::mla::kHopperMaxSms)
      .workspace_bytes;
}

void mla(const MlaArgs& args, const MlaOptions& opts, Stream stream) {
  validate::mla(args, opts);
  if (args.q_nope.is_cuda()) {
    return run_gpu("mla", [&] {
      if (debug::enabled()) debug::check_device_values(args, opts, stream);
      kernels::mla::launch(args, opts, stream);
    });
  }
  reference::mla(args, opts);
}

void merge_states(const MergeArgs& args, Stream stream) {
  validate::merge_states(args);
  if (args.o_a.is_cuda()) {
    return run_gpu("merge_states", [&] { kernels::merge::launch_merge_states(args, stream); });
  }
  reference::merge_states(args);
}

void merge_states_n(const MergeNArgs& args, Stream stream) {
  validate::merge_states_n(args);
  if (args.o.is_cuda()) {
    return run_gpu("merge_states_n", [&] { kernels::merge::launch_merge_states_n(args, stream); });
  }
  reference::merge_states_n(args);
}

void BatchAttention::run(const BatchArgs& args, Stream stream) const {
  Impl& s = *impl_;
  validate::batch_run(args, s.config, s.planned_step(), s.workspace_bytes);
  if (args.q.is_cuda()) {
#ifdef HOPATTN_WITH_CUDA
    if (debug::enabled()) {
      debug::check_device_values(args, s.config, s.planned_step(), s.workspace_bytes, stream);
    }
    kernels::batch::check_supported(args, s.config);
    const plan::BatchWorkspaceLayout& layout = s.layout;
    auto* ws = static_cast<unsigned char*>(args.workspace.data);
    if (s.uploaded_to != args.workspace.data) {
      // The plan is still on the host (a plan() without a workspace, or another workspace).
      if (kernels::batch::stream_is_capturing(stream)) {
        throw Error(ErrorKind::kValue,
                    "hopattn.BatchAttention.run: workspace: expected the workspace the plan was "
                    "uploaded to while a CUDA graph is captured (call plan(..., workspace, stream) "
                    "before capturing), got one that does not hold the plan");
      }
      s.upload(args.workspace, stream);
    }
    // The concurrent form (plan::BatchConcurrentForm) outside a capture: its decode calls are
    // built and validated before anything is launched. They are views of arguments batch_run
    // accepted, so the decode validator takes them; were it ever to refuse one, the single plan
    // computes the step instead (it covers every step).
    const plan::BatchConcurrentForm& form = s.concurrent;
    bool concurrent =
        form.prefill_ctas > 0 && s.side != nullptr && !kernels::batch::stream_is_capturing(stream);
    DecodeArgs decodes[plan::kMaxConcurrentDecodeRuns];
    DecodeOptions decode_opts[plan::kMaxConcurrentDecodeRuns];
    for (int r = 0; concurrent && r < form.num_runs; ++r) {
      decodes[r] = batch_concurrent::decode_args(args, s.config, s.current.cu_seqlens_q.data(),
                                                 form.runs[r]);
      decode_opts[r] =
          batch_concurrent::decode_options(s.config, decodes[r], s.concurrent_decode_kernel);
      try {
        validate::decode(decodes[r], decode_opts[r]);
      } catch (const Error&) {
        concurrent = false;
      }
    }
    kernels::batch::StepLaunch step;
    step.plan = ws + layout.plan_offset + (concurrent ? form.plan_offset : 0);
    step.partial_o = reinterpret_cast<float*>(ws + layout.partial_o_offset);
    step.partial_lse = reinterpret_cast<float*>(ws + layout.partial_lse_offset);
    step.num_ctas = s.limits.num_ctas;
    step.max_q_len = s.max_q_len;
    step.max_kv_len = s.max_kv_len;
    step.total_q = s.summary.total_q;
    step.side_lane = !concurrent && s.summary.num_side_items > 0;
    step.has_merges = concurrent ? form.num_merges > 0 : s.summary.num_merges > 0;
    step.paged_tma = s.paged_tma;
    if (!concurrent) return kernels::batch::run(args, s.config, step, stream);
    // With an SM order (one launch of the prefill, on as many SMs as the grid has CTAs), the
    // prefill CTAs take their lists by SM and leave the order's first SMs to the decodes; its
    // claims are zeroed before the fork, so that the decodes do not start ahead of the prefill.
    kernels::batch::SmPlacement* placement = s.placement.get();
    if (placement != nullptr && !form.tail && placement->sms() == step.num_ctas) {
      placement->reset(stream);
      step.sm_rank = placement->ranks();
      step.claims = placement->claims();
      step.placed_lists = form.prefill_ctas;
    }
    // Forked before the prefill launch (the decodes wait for what came before the step) and
    // launched after it (its persistent CTAs take their SMs first; the CTAs without items exit at
    // once and leave theirs to the decodes).
    kernels::batch::SideStream::Fork fork(*s.side, stream);
    if (form.tail) step.cta_last = form.prefill_ctas;
    kernels::batch::run(args, s.config, step, stream);
    for (int r = 0; r < form.num_runs; ++r) {
      kernels::decode::launch(decodes[r], decode_opts[r],
                              kernels::decode::device_plan(decodes[r], decode_opts[r]),
                              s.side->stream());
    }
    if (form.tail) {  // the other CTAs' prefill lists, on the SMs the decodes leave (no merges)
      kernels::batch::StepLaunch tail = step;
      tail.cta_first = form.prefill_ctas;
      tail.cta_last = kernels::batch::StepLaunch{}.cta_last;  // through the group's last CTA
      kernels::batch::run(args, s.config, tail, s.side->stream());
    }
    fork.join();
    return;
#else
    (void)stream;
    no_gpu_kernel("BatchAttention.run", "the batch family");
#endif
  }
  reference::batch(args, s.config, s.plan, s.partial_o.get(), s.partial_lse.get());
}

bool built_with_cuda() {
#ifdef HOPATTN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace hopattn
