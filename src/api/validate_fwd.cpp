// Validation of attention_fwd and attention_bwd. The backward takes the forward's arguments (with
// out and lse as inputs) plus the gradients, so both share one check of the forward's arguments.
#include <algorithm>
#include <array>

#include "api/validate.hpp"
#include "api/validate_common.hpp"
#include "hopattn/api.hpp"
#include "kernels/fwd/configs.hpp"

namespace hopattn::validate {
namespace {

enum class KVLayoutKind { kDense, kVarlen, kPaged };

// Any page-table field marks a paged call, so that a half-filled page table is reported as such
// rather than silently ignored.
KVLayoutKind layout_of(const FwdArgs& a) {
  const PageTable& p = a.pages;
  if (p.block_table.defined() || p.indptr.defined() || p.indices.defined() || p.kv_lens.defined()) {
    return KVLayoutKind::kPaged;
  }
  if (a.cu_seqlens_q.defined() || a.cu_seqlens_k.defined()) return KVLayoutKind::kVarlen;
  return KVLayoutKind::kDense;
}

void check_options(const Checker& c, const AttentionOptions& o) {
  c.window(o.window);
  c.softcap(o.softcap);
  c.scale(o.scale);
}

// The CPU reference takes any head dims in range; GPU kernels are built for these pairs only.
void check_head_dims(const Checker& c, int64_t dqk, int64_t dv) {
  c.head_dims_in_range(dqk, dv);
  if (!c.on_cuda()) return;
  if (!kernels::fwd::built_head_dims(dqk, dv)) {  // the table in kernels/fwd/configs.hpp
    c.fail(ErrorKind::kNotImplemented, "head_dim", kernels::fwd::head_dims_choice() + " on CUDA",
           head_dims_string(dqk, dv));
  }
}

// k and v: dense [B, Sk, Hkv, D], varlen [total_k, Hkv, D] or page pools. Returns Hkv, and the
// pool for a paged call.
int64_t check_kv(const Checker& c, const FwdArgs& a, KVLayoutKind layout, PagePool* pool) {
  const DTypes q_dtype({a.q.dtype()}, "q's dtype");
  for (const auto& [t, arg] : {std::pair{&a.k, "k"}, std::pair{&a.v, "v"}}) {
    c.defined(*t, arg);
    c.same_device(*t, arg);
    c.dtype(*t, arg, q_dtype);
  }
  const int64_t dqk = a.q.size(-1);
  int64_t hkv = 0;
  switch (layout) {
    case KVLayoutKind::kDense:
      c.rank(a.k, "k", 4, "[B, Sk, Hkv, Dqk]");
      c.token_count(a.k.size(1), "k", "keys");
      c.shape(a.k, "k", Shape::of(a.k).with(0, a.q.size(0)).with(-1, dqk), "q's B and Dqk");
      c.rank(a.v, "v", 4, "[B, Sk, Hkv, Dv]");
      hkv = a.k.size(2);
      break;
    case KVLayoutKind::kVarlen:
      c.rank(a.k, "k", 3, "[total_k, Hkv, Dqk]");
      c.token_count(a.k.size(0), "k", "keys");
      c.shape(a.k, "k", Shape::of(a.k).with(-1, dqk), "q's Dqk");
      c.rank(a.v, "v", 3, "[total_k, Hkv, Dv]");
      hkv = a.k.size(1);
      break;
    case KVLayoutKind::kPaged:
      *pool = c.page_pool(a.k, "k", a.pages.layout);
      c.shape(a.k, "k", Shape::of(a.k).with(-1, dqk), "q's Dqk");
      c.page_pool(a.v, "v", a.pages.layout);
      hkv = pool->num_heads;
      break;
  }
  c.shape(a.v, "v", Shape::of(a.k).with(-1, a.v.size(-1)), "k's shape with v's own Dv");
  return hkv;
}

// cu_seqlens (varlen) or cu_seqlens_q + page table (paged): structure always, values on host.
void check_sequences(const Checker& c, const FwdArgs& a, KVLayoutKind layout,
                     const PagePool& pool) {
  if (layout == KVLayoutKind::kDense) return;
  c.max_seqlen(a.max_seqlen_q, "max_seqlen_q");
  c.max_seqlen(a.max_seqlen_k, "max_seqlen_k");
  const int64_t batch = c.offsets(a.cu_seqlens_q, "cu_seqlens_q",
                                  {a.q.size(0), "q", -1, {}, a.max_seqlen_q, "max_seqlen_q"});
  if (layout == KVLayoutKind::kVarlen) {
    c.offsets(a.cu_seqlens_k, "cu_seqlens_k",
              {a.k.size(0), "k", batch, "cu_seqlens_q", a.max_seqlen_k, "max_seqlen_k"});
    return;
  }
  if (a.cu_seqlens_k.defined()) {
    c.fail(ErrorKind::kValue, "cu_seqlens_k",
           "none with a paged KV cache (kv_lens are the lengths)",
           "shape " + a.cu_seqlens_k.shape_string());
  }
  c.page_table(a.pages, batch, "cu_seqlens_q", pool, a.max_seqlen_k, "max_seqlen_k");
}

struct FwdDims {
  int64_t hq, hkv, dqk, dv;
};

FwdDims check_fwd_args(const Checker& c, const FwdArgs& a) {
  const KVLayoutKind layout = layout_of(a);
  c.dtype(a.q, "q", c.attention_dtypes());
  if (layout == KVLayoutKind::kDense) {
    c.rank(a.q, "q", 4, "[B, Sq, Hq, Dqk] (or rank 3 [total_q, Hq, Dqk] with cu_seqlens_q)");
  } else {
    c.rank(a.q, "q", 3,
           layout == KVLayoutKind::kPaged ? "[total_q, Hq, Dqk] (a paged KV cache takes varlen q)"
                                          : "[total_q, Hq, Dqk] (varlen: cu_seqlens are given)");
  }
  c.token_count(a.q.size(-3), "q", "queries");
  PagePool pool;
  const FwdDims d{a.q.size(-2), check_kv(c, a, layout, &pool), a.q.size(-1), a.v.size(-1)};
  c.heads(d.hq, d.hkv, "k");
  check_head_dims(c, d.dqk, d.dv);

  const DTypes fp32({DType::kFP32});
  c.tensor(a.out, "out", DTypes({a.q.dtype()}, "q's dtype"), Shape::of(a.q).with(-1, d.dv),
           "q's shape with Dv last");
  c.tensor(a.lse, "lse", fp32, Shape::of(a.q).without_last(), "q's shape without the last dim");
  c.sinks(a.sinks, d.hq);
  c.tma_layout(a.q, "q");
  c.tma_layout(a.k, "k");
  c.tma_layout(a.v, "v");
  c.tma_layout(a.out, "out");
  check_sequences(c, a, layout, pool);
  return d;
}

// The forward's inputs, for the output overlap rule (Checker::outputs_disjoint).
std::array<Arg, 10> fwd_inputs(const FwdArgs& a) {
  return {{{&a.q, "q"},
           {&a.k, "k"},
           {&a.v, "v"},
           {&a.sinks, "sinks"},
           {&a.cu_seqlens_q, "cu_seqlens_q"},
           {&a.cu_seqlens_k, "cu_seqlens_k"},
           {&a.pages.block_table, "page_table"},
           {&a.pages.indptr, "page_indptr"},
           {&a.pages.indices, "page_indices"},
           {&a.pages.kv_lens, "kv_lens"}}};
}

}  // namespace

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts, DeviceValues values) {
  const Checker c("attention_fwd", args.q, "q", values);
  check_options(c, opts);
  check_fwd_args(c, args);
  c.outputs_disjoint({{&args.out, "out"}, {&args.lse, "lse"}}, fwd_inputs(args));
}

void attention_bwd(const BwdArgs& args, const AttentionOptions& opts, DeviceValues values) {
  const FwdArgs& f = args.fwd;
  const Checker c("attention_bwd", f.q, "q", values);
  check_options(c, opts);
  const FwdDims d = check_fwd_args(c, f);
  // Training has no paged KV cache; the CPU reference takes one, the CUDA backward does not.
  if (c.on_cuda() && layout_of(f) == KVLayoutKind::kPaged) {
    c.fail(ErrorKind::kNotImplemented, "page_table",
           "dense or varlen k and v on CUDA (the backward has no paged KV cache)",
           "a paged KV cache");
  }

  c.tensor(args.dout, "dout", DTypes({f.out.dtype()}, "out's dtype"), Shape::of(f.out),
           "out's shape");
  c.tensor(args.dq, "dq", DTypes({f.q.dtype()}, "q's dtype"), Shape::of(f.q), "q's shape");
  c.tensor(args.dk, "dk", DTypes({f.k.dtype()}, "k's dtype"), Shape::of(f.k), "k's shape");
  c.tensor(args.dv, "dv", DTypes({f.v.dtype()}, "v's dtype"), Shape::of(f.v), "v's shape");
  if (f.sinks.defined()) {
    c.optional_tensor(args.dsinks, "dsinks", DTypes({DType::kFP32}), {d.hq}, "[Hq]");
  } else if (args.dsinks.defined()) {
    c.fail(ErrorKind::kValue, "dsinks", "none (no sinks were given)",
           "shape " + args.dsinks.shape_string());
  }
  c.tma_layout(args.dout, "dout");
  c.tma_layout(args.dq, "dq");
  c.tma_layout(args.dk, "dk");
  c.tma_layout(args.dv, "dv");
  c.workspace(args.workspace, attention_bwd_workspace_size(args, opts));

  // Here the forward's out and lse are inputs, read while the gradients are written.
  std::array<Arg, 13> inputs;
  const std::array<Arg, 10> fwd = fwd_inputs(f);
  std::copy(fwd.begin(), fwd.end(), inputs.begin());
  inputs[10] = {&f.out, "out"};
  inputs[11] = {&f.lse, "lse"};
  inputs[12] = {&args.dout, "dout"};
  c.outputs_disjoint(
      {{&args.dq, "dq"}, {&args.dk, "dk"}, {&args.dv, "dv"}, {&args.dsinks, "dsinks"}}, inputs);
}

}  // namespace hopattn::validate
