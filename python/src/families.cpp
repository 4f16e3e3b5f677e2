// Bindings of the attention families. Each takes its tensors (inputs and caller-allocated outputs)
// as DLPack objects and its options as keywords, and calls the C++ entry point with the GIL
// released. Outputs are allocated by the Python layer in the caller's framework, so nothing here
// allocates device memory (CUDA-graph capture safe).
#include <optional>
#include <string>

#include "bindings.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "tensors.hpp"

namespace hopattn::python {

using namespace nb::literals;

namespace {

// ---------------------------------------------------------------- fwd / bwd
struct AttentionKwargs {
  nb::handle cu_seqlens_q, cu_seqlens_k;
  int max_seqlen_q, max_seqlen_k;
  nb::handle page_table, kv_lens;
  std::string kv_layout;
  nb::handle sinks;
  bool causal;
  int window_left, window_right;
  float softcap;
  std::optional<float> scale;
  bool deterministic;
};

AttentionOptions attention_options(const AttentionKwargs& kw) {
  AttentionOptions o;
  o.causal = kw.causal;
  o.window = {kw.window_left, kw.window_right};
  o.softcap = kw.softcap;
  o.scale = kw.scale;
  o.deterministic = kw.deterministic;
  return o;
}

FwdArgs fwd_args(TensorImporter& t, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                 nb::handle lse, const AttentionKwargs& kw, bool outputs_writable) {
  FwdArgs a;
  a.q = t.input(q, "q");
  a.k = t.input(k, "k");
  a.v = t.input(v, "v");
  a.cu_seqlens_q = t.index(kw.cu_seqlens_q, "cu_seqlens_q");
  a.cu_seqlens_k = t.index(kw.cu_seqlens_k, "cu_seqlens_k");
  if (!kw.page_table.is_none() || !kw.kv_lens.is_none()) {
    a.pages = import_pages(t, kw.page_table, kw.kv_lens, kw.kv_layout);
  }
  a.max_seqlen_q = kw.max_seqlen_q;
  a.max_seqlen_k = kw.max_seqlen_k;
  read_host_bounds(a);
  a.sinks = t.input(kw.sinks, "sinks");
  a.out = outputs_writable ? t.output(out, "out") : t.input(out, "out");
  a.lse = outputs_writable ? t.output(lse, "lse") : t.input(lse, "lse");
  return a;
}

struct BwdCall {
  TensorImporter tensors;
  BwdArgs args;
  AttentionOptions opts;
};

void fill_bwd(BwdCall& c, nb::handle dout, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
              nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, nb::handle dsinks,
              const AttentionKwargs& kw) {
  c.args.fwd = fwd_args(c.tensors, q, k, v, out, lse, kw, /*outputs_writable=*/false);
  c.args.dout = c.tensors.input(dout, "dout");
  c.args.dq = c.tensors.output(dq, "dq");
  c.args.dk = c.tensors.output(dk, "dk");
  c.args.dv = c.tensors.output(dv, "dv");
  c.args.dsinks = c.tensors.output(dsinks, "dsinks");
  c.opts = attention_options(kw);
}

// Defines `name` with the keyword list shared by the fwd and bwd bindings (attention_fwd refuses
// the workspace keyword's object: only the backward takes one).
template <typename Fn, typename... Leading>
void def_attention(nb::module_& m, const char* name, Fn fn, const char* doc, Leading... leading) {
  m.def(name, fn, leading..., nb::kw_only(), "cu_seqlens_q"_a = nb::none(),
        "cu_seqlens_k"_a = nb::none(), "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
        "page_table"_a = nb::none(), "kv_lens"_a = nb::none(), "kv_layout"_a = "NHD",
        "sinks"_a = nb::none(), "causal"_a = false, "window_left"_a = -1, "window_right"_a = -1,
        "softcap"_a = 0.f, "scale"_a = nb::none(), "deterministic"_a = false,
        "workspace"_a = nb::none(), "stream"_a = 0, doc);
}

// ---------------------------------------------------------------- decode
struct DecodeCall {
  TensorImporter tensors;
  DecodeArgs args;
  DecodeOptions opts;
};

void fill_decode(DecodeCall& c, nb::handle q, nb::handle k_cache, nb::handle v_cache,
                 nb::handle kv_lens, nb::handle page_table, nb::handle out, nb::handle lse,
                 const std::string& kv_layout, bool causal, int window_left, int window_right,
                 float softcap, std::optional<float> scale, nb::handle sinks, float k_scale,
                 nb::handle k_scale_per_head, float v_scale, nb::handle v_scale_per_head,
                 nb::handle tree_mask, int beam_width, nb::handle shared_kv_lens, int num_splits,
                 nb::handle workspace) {
  TensorImporter& t = c.tensors;
  c.args.q = t.input(q, "q");
  c.args.k_cache = t.input(k_cache, "k_cache");
  c.args.v_cache = t.input(v_cache, "v_cache");
  c.args.pages = import_pages(t, page_table, kv_lens, kv_layout);
  c.args.k_scale = {k_scale, t.input(k_scale_per_head, "k_scale")};
  c.args.v_scale = {v_scale, t.input(v_scale_per_head, "v_scale")};
  c.args.sinks = t.input(sinks, "sinks");
  c.args.tree_mask = t.input(tree_mask, "tree_mask");
  c.args.shared_kv_lens = t.index(shared_kv_lens, "shared_kv_lens");
  c.args.out = t.output(out, "out");
  c.args.lse = t.output(lse, "lse");
  c.args.workspace = import_workspace(t, workspace);
  c.opts.causal = causal;
  c.opts.window = {window_left, window_right};
  c.opts.softcap = softcap;
  c.opts.scale = scale;
  c.opts.beam_width = beam_width;
  c.opts.num_splits = num_splits;
}

template <typename Fn>
void def_decode(nb::module_& m, const char* name, Fn fn, const char* doc) {
  m.def(name, fn, "q"_a, "k_cache"_a, "v_cache"_a, "kv_lens"_a, "page_table"_a, "out"_a, "lse"_a,
        nb::kw_only(), "kv_layout"_a = "NHD", "causal"_a = true, "window_left"_a = -1,
        "window_right"_a = -1, "softcap"_a = 0.f, "scale"_a = nb::none(), "sinks"_a = nb::none(),
        "k_scale"_a = 1.f, "k_scale_per_head"_a = nb::none(), "v_scale"_a = 1.f,
        "v_scale_per_head"_a = nb::none(), "tree_mask"_a = nb::none(), "beam_width"_a = 1,
        "shared_kv_lens"_a = nb::none(), "num_splits"_a = 0, "workspace"_a = nb::none(),
        "stream"_a = 0, doc);
}

}  // namespace

void bind_families(nb::module_& m) {
  def_attention(
      m, "attention_fwd",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
         nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
         nb::handle page_table, nb::handle kv_lens, const std::string& kv_layout, nb::handle sinks,
         bool causal, int window_left, int window_right, float softcap, std::optional<float> scale,
         bool deterministic, nb::handle workspace, uintptr_t stream) {
        // The keyword list is the backward's, whose workspace the forward has no use for: a
        // workspace given here is refused rather than silently dropped.
        if (!workspace.is_none()) {
          throw Error(ErrorKind::kValue,
                      "hopattn.attention_fwd: workspace: expected None (the forward needs no "
                      "workspace), got an object");
        }
        const AttentionKwargs kw{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 page_table,   kv_lens,      kv_layout,    sinks,
                                 causal,       window_left,  window_right, softcap,
                                 scale,        deterministic};
        TensorImporter tensors;
        const FwdArgs args = fwd_args(tensors, q, k, v, out, lse, kw, /*outputs_writable=*/true);
        const AttentionOptions opts = attention_options(kw);
        DeviceGuard device(args.q.device());
        nb::gil_scoped_release release;
        attention_fwd(args, opts, as_stream(stream));
      },
      "Writes attention(q, k, v) into out and lse (caller-allocated).", "q"_a, "k"_a, "v"_a,
      "out"_a, "lse"_a);

  const auto bwd = [](bool size_only) {
    return [size_only](nb::handle dout, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                       nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv,
                       nb::handle dsinks, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k,
                       int max_seqlen_q, int max_seqlen_k, nb::handle page_table,
                       nb::handle kv_lens, const std::string& kv_layout, nb::handle sinks,
                       bool causal, int window_left, int window_right, float softcap,
                       std::optional<float> scale, bool deterministic, nb::handle workspace,
                       uintptr_t stream) -> size_t {
      const AttentionKwargs kw{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, page_table,
                               kv_lens,      kv_layout,    sinks,        causal,       window_left,
                               window_right, softcap,      scale,        deterministic};
      BwdCall c;
      fill_bwd(c, dout, q, k, v, out, lse, dq, dk, dv, dsinks, kw);
      if (size_only) return attention_bwd_workspace_size(c.args, c.opts);
      c.args.workspace = import_workspace(c.tensors, workspace);
      DeviceGuard device(c.args.fwd.q.device());
      nb::gil_scoped_release release;
      attention_bwd(c.args, c.opts, as_stream(stream));
      return 0;
    };
  };
  def_attention(m, "attention_bwd", bwd(false),
                "Writes dq, dk, dv (and dsinks when given) of attention (caller-allocated).",
                "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dq"_a, "dk"_a, "dv"_a,
                "dsinks"_a = nb::none());
  def_attention(m, "attention_bwd_workspace_size", bwd(true),
                "Bytes of workspace attention_bwd needs for these arguments.", "dout"_a, "q"_a,
                "k"_a, "v"_a, "out"_a, "lse"_a, "dq"_a, "dk"_a, "dv"_a, "dsinks"_a = nb::none());

  const auto dec = [](bool size_only) {
    return [size_only](nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle kv_lens,
                       nb::handle page_table, nb::handle out, nb::handle lse,
                       const std::string& kv_layout, bool causal, int window_left, int window_right,
                       float softcap, std::optional<float> scale, nb::handle sinks, float k_scale,
                       nb::handle k_scale_per_head, float v_scale, nb::handle v_scale_per_head,
                       nb::handle tree_mask, int beam_width, nb::handle shared_kv_lens,
                       int num_splits, nb::handle workspace, uintptr_t stream) -> size_t {
      DecodeCall c;
      fill_decode(c, q, k_cache, v_cache, kv_lens, page_table, out, lse, kv_layout, causal,
                  window_left, window_right, softcap, scale, sinks, k_scale, k_scale_per_head,
                  v_scale, v_scale_per_head, tree_mask, beam_width, shared_kv_lens, num_splits,
                  size_only ? nb::none() : workspace);
      const size_t needed = decode_workspace_size(c.args, c.opts);
      // A workspace smaller than needed: nothing runs, the caller allocates `needed` bytes and
      // calls again. So a caller holding a large enough buffer converts its tensors once.
      if (size_only || c.args.workspace.bytes < needed) return needed;
      DeviceGuard device(c.args.q.device());
      nb::gil_scoped_release release;
      decode(c.args, c.opts, as_stream(stream));
      return 0;
    };
  };
  def_decode(
      m, "decode", dec(false),
      "Writes paged decode attention into out and lse and returns 0; or, when the "
      "workspace is smaller than the call needs, runs nothing and returns the bytes needed.");
  def_decode(m, "decode_workspace_size", dec(true),
             "Bytes of workspace decode needs for these arguments.");

  m.def(
      "mla",
      [](nb::handle q_nope, nb::handle q_pe, nb::handle ckv, nb::handle kpe,
         nb::handle cu_seqlens_q, nb::handle kv_lens, nb::handle page_table, nb::handle out,
         nb::handle lse, int max_seqlen_q, bool causal, std::optional<float> scale, float kv_scale,
         int num_splits, const std::string& schedule, nb::handle workspace,
         uintptr_t stream) -> size_t {
        TensorImporter t;
        MlaArgs a;
        a.q_nope = t.input(q_nope, "q_nope");
        a.q_pe = t.input(q_pe, "q_pe");
        a.ckv = t.input(ckv, "ckv");
        a.kpe = t.input(kpe, "kpe");
        a.cu_seqlens_q = t.index(cu_seqlens_q, "cu_seqlens_q");
        a.max_seqlen_q = max_seqlen_q;
        read_host_bounds(a);
        a.pages = import_pages(t, page_table, kv_lens, "NHD");
        a.out = t.output(out, "out");
        a.lse = t.output(lse, "lse");
        a.kv_scale = kv_scale;
        a.workspace = import_workspace(t, workspace);
        MlaOptions opts;
        opts.causal = causal;
        opts.scale = scale;
        opts.num_splits = num_splits;
        opts.schedule = mla_schedule_named(schedule);
        const size_t needed = mla_workspace_size(a, opts);
        // A workspace smaller than needed: nothing runs, the caller allocates `needed` bytes and
        // calls again (as decode does).
        if (a.workspace.bytes < needed) return needed;
        DeviceGuard device(a.q_nope.device());
        nb::gil_scoped_release release;
        mla(a, opts, as_stream(stream));
        return 0;
      },
      "q_nope"_a, "q_pe"_a, "ckv"_a, "kpe"_a, "cu_seqlens_q"_a, "kv_lens"_a, "page_table"_a,
      "out"_a, "lse"_a, nb::kw_only(), "max_seqlen_q"_a = 0, "causal"_a = true,
      "scale"_a = nb::none(), "kv_scale"_a = 1.f, "num_splits"_a = 0, "schedule"_a = "auto",
      "workspace"_a = nb::none(), "stream"_a = 0,
      "Writes multi-head latent attention into out and lse (caller-allocated) and returns 0; "
      "or, when the workspace is smaller than the call needs, runs nothing and returns the bytes "
      "needed.");

  m.def(
      "merge_states",
      [](nb::handle o_a, nb::handle lse_a, nb::handle o_b, nb::handle lse_b, nb::handle out,
         nb::handle lse, uintptr_t stream) {
        TensorImporter t;
        MergeArgs a;
        a.o_a = t.input(o_a, "o_a");
        a.lse_a = t.input(lse_a, "lse_a");
        a.o_b = t.input(o_b, "o_b");
        a.lse_b = t.input(lse_b, "lse_b");
        a.out = t.output(out, "out");
        a.lse = t.output(lse, "lse");
        DeviceGuard device(a.o_a.device());
        nb::gil_scoped_release release;
        merge_states(a, as_stream(stream));
      },
      "o_a"_a, "lse_a"_a, "o_b"_a, "lse_b"_a, "out"_a, "lse"_a, nb::kw_only(), "stream"_a = 0,
      "Writes the merge of two partial attention states into out and lse.");

  m.def(
      "merge_states_n",
      [](nb::handle o, nb::handle lse, nb::handle out, nb::handle lse_out, uintptr_t stream) {
        TensorImporter t;
        MergeNArgs a;
        a.o = t.input(o, "o");
        a.lse = t.input(lse, "lse");
        a.out = t.output(out, "out");
        a.lse_out = t.output(lse_out, "lse_out");
        DeviceGuard device(a.o.device());
        nb::gil_scoped_release release;
        merge_states_n(a, as_stream(stream));
      },
      "o"_a, "lse"_a, "out"_a, "lse_out"_a, nb::kw_only(), "stream"_a = 0,
      "Writes the merge of n partial attention states (axis 1) into out and lse_out.");
}

}  // namespace hopattn::python
