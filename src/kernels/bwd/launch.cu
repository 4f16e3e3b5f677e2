// Host side of the bwd family: support checks, workspace carving, tensor maps, parameters and the
// launches of the three stages (memset + preprocess, main kernel, postprocess). The main kernels
// are instantiated per row of ../fwd/configs.hpp in launch_hd*.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "hopattn/error.hpp"
#include "kernels/bwd/configs.cuh"
#include "kernels/bwd/launch.hpp"
#include "kernels/bwd/postprocess.cuh"
#include "kernels/bwd/preprocess.cuh"
#include "kernels/common/cuda_host.hpp"
#include "kernels/common/device_status_host.hpp"
#include "kernels/common/math_constants.hpp"
#include "kernels/common/tma_views.hpp"
#include "kernels/fwd/configs.hpp"
#include "ptx/tensor_map.hpp"

namespace hopattn::kernels::bwd {

namespace {

[[noreturn]] void unsupported(const std::string& what) {
  throw Error(ErrorKind::kNotImplemented, "hopattn.attention_bwd on CUDA: " + what);
}

constexpr const char* kWhere = "hopattn.attention_bwd";

void cuda_ok(cudaError_t err, const char* what) { throw_if_cuda_error(err, kWhere, what); }

bool is_varlen(const FwdArgs& a) { return a.cu_seqlens_q.defined(); }

// Element strides of o, dout, dq ([B, S, H, D] or [total, H, D]) and of lse ([B, S, H] or
// [total, H]).
RowTensor row_tensor(const TensorView& t, bool varlen) {
  RowTensor r;
  r.data = t.data();
  const int first = varlen ? 0 : 1;
  if (!varlen) r.batch_stride = t.stride(0);
  r.row_stride = t.stride(first);
  r.head_stride = t.stride(first + 1);
  return r;
}

// Everything the three stages share.
struct Problem {
  bool varlen = false;
  int hq = 0, hkv = 0;
  int64_t dqk = 0, dv = 0;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  int64_t q_rows = 0, k_rows = 0;  // rows of the q and k tensors (all requests)
  float scale = 0.f;
  SequenceParams seq;
  WorkspaceLayout layout;
  WorkspaceParams ws;
  int section = 1;  // groups per launch section (CtaOrder): the host planner's choice
};

Problem make_problem(const BwdArgs& args, const AttentionOptions& opts,
                     const LaunchOptions& launch) {
  const FwdArgs& f = args.fwd;
  Problem pr;
  pr.varlen = is_varlen(f);
  const HeadMajorView q = head_major_view(f.q, pr.varlen);
  const HeadMajorView k = head_major_view(f.k, pr.varlen);
  pr.hq = static_cast<int>(q.h);
  pr.hkv = static_cast<int>(k.h);
  pr.dqk = q.d;
  pr.dv = f.v.size(-1);
  pr.q_rows = q.b * q.s;
  pr.k_rows = k.b * k.s;
  pr.seq.total_q = static_cast<int>(pr.q_rows);
  pr.seq.total_k = static_cast<int>(pr.k_rows);
  pr.seq.status = device_status(f.q.device().index, kWhere);
  if (pr.varlen) {
    pr.seq.batch = static_cast<int>(f.cu_seqlens_q.size(0) - 1);
    pr.seq.cu_seqlens_q = f.cu_seqlens_q.data_as<const int>();
    pr.seq.cu_seqlens_k = f.cu_seqlens_k.data_as<const int>();
    pr.max_seqlen_q = f.max_seqlen_q;
    pr.max_seqlen_k = f.max_seqlen_k;
  } else {
    pr.seq.batch = static_cast<int>(q.b);
    pr.seq.seqlen_q = static_cast<int>(q.s);
    pr.seq.seqlen_k = static_cast<int>(k.s);
    pr.max_seqlen_q = pr.seq.seqlen_q;
    pr.max_seqlen_k = pr.seq.seqlen_k;
  }
  pr.seq.max_seqlen_q = pr.max_seqlen_q;
  pr.scale = opts.scale ? *opts.scale : 1.0f / std::sqrt(static_cast<float>(pr.dqk));

  pr.layout = workspace_layout(args);
  auto* base = static_cast<uint8_t*>(args.workspace.data);
  pr.ws.rows = pr.layout.rows;
  pr.ws.dense_padded_len = pr.varlen
                               ? 0
                               : ((pr.seq.seqlen_q + pr.layout.block_m - 1) / pr.layout.block_m) *
                                     int64_t{pr.layout.block_m};
  pr.ws.lse_log2 = reinterpret_cast<float*>(base + pr.layout.lse_offset);
  pr.ws.delta = reinterpret_cast<float*>(base + pr.layout.delta_offset);
  pr.ws.dsink = reinterpret_cast<float*>(base + pr.layout.dsink_offset);
  pr.ws.dq_accum = reinterpret_cast<float*>(base + pr.layout.dq_accum_offset);
  pr.ws.semaphore =
      opts.deterministic ? reinterpret_cast<uint32_t*>(base + pr.layout.semaphore_offset) : nullptr;

  plan::BwdOrderShape order;
  order.q_heads = pr.hq;
  order.kv_heads = pr.hkv;
  order.batch = pr.seq.batch;
  order.max_seqlen_q = pr.max_seqlen_q;
  order.head_dim_qk = pr.dqk;
  order.head_dim_v = pr.dv;
  pr.section = plan::bwd_launch_section(order, opts, launch.order);
  return pr;
}

RowKernelParams row_params(const BwdArgs& args, const Problem& pr) {
  const FwdArgs& f = args.fwd;
  RowKernelParams p{};
  p.seq = pr.seq;
  p.ws = pr.ws;
  p.block_m = pr.layout.block_m;
  p.heads_q = pr.hq;
  p.head_dim = static_cast<int>(pr.dqk);
  p.head_dim_v = static_cast<int>(pr.dv);
  p.out = row_tensor(f.out, pr.varlen);
  p.dout = row_tensor(args.dout, pr.varlen);
  p.lse = row_tensor(f.lse, pr.varlen);
  p.dq = row_tensor(args.dq, pr.varlen);
  if (f.sinks.defined() && args.dsinks.defined()) {
    p.sinks = f.sinks.data_as<const float>();
    p.sinks_stride = f.sinks.stride(0);
    p.dsinks = args.dsinks.data_as<float>();
    p.dsinks_stride = args.dsinks.stride(0);
  }
  p.scale = pr.scale;
  return p;
}

template <class Traits>
void run_main(const BwdArgs& args, const AttentionOptions& opts, const Problem& pr,
              cudaStream_t stream) {
  const FwdArgs& f = args.fwd;
  BwdParams p{};
  p.seq = pr.seq;
  p.ws = pr.ws;
  p.heads_q = pr.hq;
  p.heads_kv = pr.hkv;
  p.group = pr.hq / pr.hkv;
  p.window_left = opts.window.left;
  p.window_right = opts.causal ? 0 : opts.window.right;
  // A softcap is on where softcap_scale != 0 (negative with a negative scale); with scale 0
  // every logit is 0, softcap or not.
  if (opts.softcap > 0.f && pr.scale != 0.f) {
    p.softcap_scale = pr.scale / opts.softcap;
    p.scale_log2 = opts.softcap * kLog2e;
  } else {
    p.scale_log2 = pr.scale * kLog2e;
  }
  p.scale = pr.scale;
  const RowTensor dk = row_tensor(args.dk, pr.varlen);
  const RowTensor dv = row_tensor(args.dv, pr.varlen);
  p.dk = dk.data;
  p.dk_batch_stride = dk.batch_stride;
  p.dk_row_stride = dk.row_stride;
  p.dk_head_stride = dk.head_stride;
  p.dv = dv.data;
  p.dv_batch_stride = dv.batch_stride;
  p.dv_row_stride = dv.row_stride;
  p.dv_head_stride = dv.head_stride;
  // Without any query row no Q/dO box is ever loaded (every CTA only writes zero dK/dV); the maps
  // then view k so that they can be encoded.
  const bool no_queries = pr.q_rows == 0;
  p.tm_q = ptx::encode_tensor_map(tma_spec(no_queries ? f.k : f.q, pr.varlen, Traits::kBlockM));
  p.tm_do =
      ptx::encode_tensor_map(tma_spec(no_queries ? f.v : args.dout, pr.varlen, Traits::kBlockM));
  p.tm_k = ptx::encode_tensor_map(tma_spec(f.k, pr.varlen, Traits::kBlockN));
  p.tm_v = ptx::encode_tensor_map(tma_spec(f.v, pr.varlen, Traits::kBlockN));
  p.order.num_n_blocks = (pr.max_seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  p.order.groups = pr.hkv * pr.seq.batch;
  p.order.section = pr.section;
  p.order.descending = opts.deterministic;
  const dim3 grid(static_cast<unsigned>(int64_t{p.order.num_n_blocks} * p.order.groups));
  cuda_ok(launch_kernel<Traits>(p, grid, stream), "bwd kernel launch");
}

template <class Elt>
void run_rows(const BwdArgs& args, const Problem& pr, bool before, cudaStream_t stream) {
  const RowKernelParams p = row_params(args, pr);
  const int m = pr.layout.block_m;
  const dim3 grid((pr.max_seqlen_q + m - 1) / m, pr.hq, pr.seq.batch);
  if (grid.x == 0) return;
  if (before) {
    preprocess_kernel<Elt><<<grid, kPreprocessThreads, 0, stream>>>(p);
    cuda_ok(cudaGetLastError(), "bwd preprocess launch");
    return;
  }
  const size_t smem = postprocess_smem_bytes(m, static_cast<int>(pr.dqk));
  postprocess_kernel<Elt><<<grid, kPostprocessThreads, smem, stream>>>(p);
  cuda_ok(cudaGetLastError(), "bwd postprocess launch");
}

// Rows of a varlen dk/dv past cu_seqlens_k[B] (nothing on the device says how many until the
// kernel reads cu_seqlens_k; a grid of a few blocks covers any count).
void zero_tail(const TensorView& t, const Problem& pr, cudaStream_t stream) {
  TailRows tr;
  tr.data = t.data_as<uint16_t>();
  tr.row_stride = t.stride(0);
  tr.head_stride = t.stride(1);
  tr.rows = static_cast<int>(t.size(0));
  tr.heads = static_cast<int>(t.size(1));
  tr.dim = static_cast<int>(t.size(2));
  tr.cu_seqlens_k = pr.seq.cu_seqlens_k;
  tr.batch = pr.seq.batch;
  zero_tail_rows_kernel<<<32, 256, 0, stream>>>(tr);
  cuda_ok(cudaGetLastError(), "bwd zero-tail launch");
}

}  // namespace

void check_supported(const BwdArgs& args, const AttentionOptions&) {
  const FwdArgs& f = args.fwd;
  if (f.pages.defined()) unsupported("a paged KV cache is not implemented for the backward");
  const int64_t dqk = f.q.size(-1), dv = f.v.size(-1);
  if (!fwd::built_head_dims(dqk, dv)) {  // the bwd kernels are built for the fwd's pairs
    unsupported(
        detail::concat("head dims (Dqk ", dqk, ", Dv ", dv,
                       ") are not built for the backward; built: ", fwd::built_head_dims_string()));
  }
  if (f.q.dtype() != DType::kBF16 && f.q.dtype() != DType::kFP16) {
    unsupported(detail::concat("dtype ", f.q.dtype(), "; built: bf16, fp16"));
  }
  if (is_varlen(f)) {
    if (!f.cu_seqlens_q.is_cuda() || !f.cu_seqlens_k.is_cuda()) {
      unsupported("cu_seqlens_q/k must be device int32 tensors with CUDA q/k/v");
    }
    if ((f.max_seqlen_q <= 0 && f.q.size(0) > 0) || (f.max_seqlen_k <= 0 && f.k.size(0) > 0)) {
      unsupported("varlen needs max_seqlen_q/k > 0 on the host (no device sync)");
    }
  }
  if (f.sinks.defined() && !f.sinks.is_cuda()) unsupported("sinks must be a device tensor");
  // q, k, v and dout are read by TMA (make_params' maps).
  const std::pair<const TensorView*, const char*> mapped[] = {
      {&f.q, "q"}, {&f.k, "k"}, {&f.v, "v"}, {&args.dout, "dout"}};
  for (const auto& [t, name] : mapped) {
    const std::string why = tma_layout_problem(*t, name, is_varlen(f));
    if (!why.empty()) unsupported(why);
  }
  if (args.dsinks.defined() && !args.dsinks.is_cuda()) {
    unsupported("dsinks must be a device tensor");
  }
  const int64_t batch = is_varlen(f) ? f.cu_seqlens_q.size(0) - 1 : f.q.size(0);
  if (batch > 65535 || f.k.size(-2) > 65535) {
    unsupported(detail::concat("at most 65535 requests and KV heads (grid limits); got ", batch,
                               " requests, ", f.k.size(-2), " KV heads"));
  }
  // The main kernel: one CTA per (KV block, KV head, request) in a 1-D grid indexed by int.
  const int64_t kv_len = is_varlen(f) ? f.max_seqlen_k : f.k.size(1);
  const int64_t block_n = block_n_for(static_cast<int>(dqk));
  const int64_t ctas = (kv_len + block_n - 1) / block_n * f.k.size(-2) * batch;
  if (ctas > INT32_MAX) {
    unsupported(detail::concat("at most ", INT32_MAX, " KV blocks x KV heads x requests (", block_n,
                               "-key blocks; grid limit); got ", ctas));
  }
}

void run(const BwdArgs& args, const AttentionOptions& opts, Stream stream,
         const LaunchOptions& launch) {
  check_supported(args, opts);
  const FwdArgs& f = args.fwd;
  const Problem pr = make_problem(args, opts, launch);
  if (args.workspace.bytes < pr.layout.total || args.workspace.data == nullptr) {
    throw Error(ErrorKind::kValue,
                detail::concat("hopattn.attention_bwd: workspace: expected >= ", pr.layout.total,
                               " bytes, got ", args.workspace.bytes));
  }
  DeviceGuard guard(f.q.device().index, kWhere);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const bool bf16 = f.q.dtype() == DType::kBF16;
  if (pr.seq.batch == 0) {  // no request: only varlen rows past cu_seqlens_k[0] = 0 to clear
    if (pr.varlen && pr.k_rows > 0) {
      zero_tail(args.dk, pr, s);
      zero_tail(args.dv, pr, s);
    }
    return;
  }

  if (pr.layout.clear_bytes > 0) {
    cuda_ok(cudaMemsetAsync(static_cast<uint8_t*>(args.workspace.data) + pr.layout.clear_offset, 0,
                            pr.layout.clear_bytes, s),
            "workspace clear");
  }
  if (bf16) {
    run_rows<__nv_bfloat16>(args, pr, true, s);
  } else {
    run_rows<__half>(args, pr, true, s);
  }
  // A launch per KV block of every request; without keys there is no dK/dV row to write and dQ
  // stays zero.
  if (pr.k_rows > 0 && pr.max_seqlen_k > 0) {
    visit_config(pr.dqk, pr.dv, f.q.dtype(),
                 [&](auto traits) { run_main<decltype(traits)>(args, opts, pr, s); });
  }
  if (bf16) {
    run_rows<__nv_bfloat16>(args, pr, false, s);
  } else {
    run_rows<__half>(args, pr, false, s);
  }
  if (args.dsinks.defined() && f.sinks.defined()) {
    const RowKernelParams p = row_params(args, pr);
    dsink_reduce_kernel<<<pr.hq, 32, 0, s>>>(p);
    cuda_ok(cudaGetLastError(), "bwd sink-gradient launch");
  }
  if (pr.varlen && pr.k_rows > 0) {
    zero_tail(args.dk, pr, s);
    zero_tail(args.dv, pr, s);
  }
}

}  // namespace hopattn::kernels::bwd
