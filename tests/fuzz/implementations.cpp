// The two CPU implementations of check.hpp. Both hand back their results through the same
// *_outputs() functions, so the parts line up name by name and element by element.
#include <cmath>
#include <vector>

#include "check.hpp"
#include "cpu/naive_decode.hpp"
#include "cpu/naive_fwd_bwd.hpp"
#include "cpu/naive_merge.hpp"
#include "hopattn/api.hpp"
#include "hopattn/batch.hpp"

namespace hopattn::fuzz {
namespace {

namespace textbook = testing::textbook;

Part part(std::string name, Part::Kind kind, DType dtype, std::vector<int64_t> shape,
          std::vector<double> values, DType inputs = DType::kFP32) {
  return {std::move(name), kind, dtype, std::move(shape), std::move(values), inputs};
}

// Varlen rows no request owns (BuildOptions::pad_rows) must keep the poison they were given:
// 1 per element that is still NaN.
std::vector<double> poison_intact(const std::vector<double>& values) {
  std::vector<double> flags;
  for (double x : values) flags.push_back(std::isnan(x) ? 1.0 : 0.0);
  return flags;
}

// fwd (and bwd when `grads` is given): per request out [q_len, Hq, Dv], lse [q_len, Hq] and the
// gradients dq, dk, dv of its rows and keys; then dsinks [Hq], summed over requests, and the
// poison flags of the unowned rows of out (and dq).
Outputs attn_outputs(const Case& c, const std::vector<textbook::Forward>& fwd,
                     const std::vector<textbook::Backward>* grads,
                     const std::vector<double>& dsinks, const std::vector<double>& out_pad,
                     const std::vector<double>& dq_pad) {
  const auto& s = c.attn.spec;
  Outputs o;
  for (size_t b = 0; b < fwd.size(); ++b) {
    const std::string of = " of request " + std::to_string(b);
    const int64_t q = s.q_lens[b], k = s.kv_lens[b];
    o.push_back(
        part("out" + of, Part::Kind::kValue, s.dtype, {q, s.hq, s.dv}, fwd[b].out, s.dtype));
    o.push_back(part("lse" + of, Part::Kind::kLse, DType::kFP32, {q, s.hq}, fwd[b].lse));
    if (!grads) continue;
    const textbook::Backward& g = (*grads)[b];
    o.push_back(part("dq" + of, Part::Kind::kGrad, s.dtype, {q, s.hq, s.dqk}, g.dq, s.dtype));
    o.push_back(part("dk" + of, Part::Kind::kGrad, s.dtype, {k, s.hkv, s.dqk}, g.dk, s.dtype));
    o.push_back(part("dv" + of, Part::Kind::kGrad, s.dtype, {k, s.hkv, s.dv}, g.dv, s.dtype));
  }
  if (grads && s.sinks) {
    o.push_back(part("dsinks", Part::Kind::kGrad, DType::kFP32, {s.hq}, dsinks, s.dtype));
  }
  const int64_t pad = c.attn.build.pad_rows;
  if (pad > 0) {
    o.push_back(part("out rows past cu_seqlens_q[B] untouched", Part::Kind::kValue, DType::kFP32,
                     {pad, s.hq, s.dv}, out_pad));
    if (grads) {
      o.push_back(part("dq rows past cu_seqlens_q[B] untouched", Part::Kind::kValue, DType::kFP32,
                       {pad, s.hq, s.dqk}, dq_pad));
    }
  }
  return o;
}

Outputs decode_outputs(const Case& c, std::vector<double> out, std::vector<double> lse) {
  const auto& d = c.decode.c;
  const int64_t hq = int64_t(d.kv_heads) * d.group;
  return {part("out", Part::Kind::kValue, d.q_dtype, {d.batch, d.q_len, hq, d.head_dim}, out,
               d.q_dtype),
          part("lse", Part::Kind::kLse, DType::kFP32, {d.batch, d.q_len, hq}, lse)};
}

Outputs mla_outputs(const Case& c, std::vector<double> out, std::vector<double> lse) {
  const auto& m = c.mla.c;
  int64_t total_q = 0;
  for (int n : m.q_lens) total_q += n;
  return {
      part("out", Part::Kind::kValue, m.q_dtype, {total_q, m.heads, kMlaLatentDim}, out, m.q_dtype),
      part("lse", Part::Kind::kLse, DType::kFP32, {total_q, m.heads}, lse)};
}

Outputs merge_outputs(const Case& c, std::vector<double> out, std::vector<double> lse) {
  const MergeCase& m = c.merge;
  return {part("out", Part::Kind::kValue, m.out_dtype, {m.tokens, m.heads, m.dim}, out, m.dtype),
          part("lse", Part::Kind::kLse, DType::kFP32, {m.tokens, m.heads}, lse)};
}

// batch: per request out [q_len, Hq, Dv] and lse [q_len, Hq] from `out` [rows, Hq, Dv] and
// `lse` [rows, Hq] over every row of the call (the step's, then its pad rows), and the poison
// flags of the pad rows. Split rows are merged from fp32 partial states (the CPU reference's and
// the kernels'), a few fp32 roundings past the one of the stored result: Part::slack.
Outputs batch_outputs(const Case& c, const std::vector<double>& out, const std::vector<double>& lse,
                      const std::vector<double>& out_pad, const std::vector<double>& lse_pad) {
  const auto& b = c.batch.c;
  const int64_t hq = b.q_heads(), dv = b.dv();
  Outputs o;
  int64_t row = 0;
  for (size_t r = 0; r < b.q_lens.size(); ++r) {
    const std::string of = " of request " + std::to_string(r);
    const int64_t q = b.q_lens[r];
    o.push_back(part("out" + of, Part::Kind::kValue, b.q_dtype, {q, hq, dv},
                     {out.begin() + row * hq * dv, out.begin() + (row + q) * hq * dv}, b.q_dtype));
    o.push_back(part("lse" + of, Part::Kind::kLse, DType::kFP32, {q, hq},
                     {lse.begin() + row * hq, lse.begin() + (row + q) * hq}));
    row += q;
  }
  for (Part& x : o) x.slack = 0x1p-21;
  if (b.pad_rows > 0) {
    o.push_back(part("out rows past the step untouched", Part::Kind::kValue, DType::kFP32,
                     {b.pad_rows, hq, dv}, out_pad));
    o.push_back(part("lse rows past the step untouched", Part::Kind::kValue, DType::kFP32,
                     {b.pad_rows, hq}, lse_pad));
  }
  return o;
}

// The textbook forward of every request of an attn case, and with `grads` its backward (handed
// the forward's out and lse as stored: out in q's dtype, lse fp32) and the requests' summed
// dsinks.
std::vector<textbook::Forward> textbook_attn(const HostProblem& p,
                                             std::vector<textbook::Backward>* grads,
                                             std::vector<double>* dsinks,
                                             bool from_stored = false) {
  const testing::fwd_bwd::Problem& prob = *p.attn;
  const textbook::Config cfg = testing::fwd_bwd::naive_config(prob.spec, p.c.attn.opts);
  std::vector<textbook::Forward> fwd;
  if (dsinks) dsinks->assign(prob.spec.sinks ? prob.spec.hq : 0, 0.0);
  for (const textbook::Request& r : prob.requests) {
    fwd.push_back(textbook::forward(cfg, r, prob.sinks));
    if (!grads) continue;
    // The backward's inputs: the stored forward, or this one rounded to the stored dtypes.
    textbook::Forward saved =
        from_stored ? p.bundle->read_forward(int64_t(fwd.size()) - 1) : fwd.back();
    if (!from_stored) {
      for (double& x : saved.out) x = testing::fwd_bwd::round_to(prob.spec.dtype, x);
      for (double& x : saved.lse) x = testing::fwd_bwd::round_to(DType::kFP32, x);
    }
    grads->push_back(textbook::backward(cfg, r, prob.sinks, &saved));
    if (dsinks) {
      for (size_t h = 0; h < dsinks->size(); ++h) (*dsinks)[h] += grads->back().dsinks[h];
    }
  }
  return fwd;
}

// ---------------------------------------------------------------- public API

// What the case's host tensors hold (read_outputs): fwd (and bwd) results, decode, mla, merge.
Outputs read_attn(HostProblem& p) {
  testing::fwd_bwd::Bundle& t = *p.bundle;
  const bool bwd = p.c.family == Family::kBwd;
  std::vector<textbook::Forward> fwd;
  std::vector<textbook::Backward> grads;
  for (int64_t b = 0; b < t.batch(); ++b) {
    fwd.push_back(t.read_forward(b));
    if (bwd) grads.push_back(t.read_backward(b));
  }
  return attn_outputs(p.c, fwd, bwd ? &grads : nullptr, t.read_dsinks(),
                      poison_intact(t.read_pad_rows(t.fwd.out)),
                      poison_intact(t.read_pad_rows(t.bwd.dq)));
}

Outputs read_decode(HostProblem& p) {
  std::vector<double> out, lse;
  testing::decode_case::read_outputs(*p.decode, out, lse);
  return decode_outputs(p.c, out, lse);
}

Outputs read_mla(HostProblem& p) {
  std::vector<double> out, lse;
  testing::mla_case::read_outputs(*p.mla, out, lse);
  return mla_outputs(p.c, out, lse);
}

Outputs read_merge(HostProblem& p) {
  const MergeRun& r = *p.merge;
  const bool n_way = p.c.merge.n_way;
  const TensorView& o = n_way ? r.many.out : r.two.out;
  const TensorView& l = n_way ? r.many.lse_out : r.two.lse;
  const std::vector<double> out = testing::gather(o), lse = testing::gather(l);
  return merge_outputs(p.c, out, lse);
}

Outputs read_batch(HostProblem& p) {
  const testing::batch_case::BatchStep& s = *p.batch;
  const std::vector<double> out = testing::gather(s.args.out), lse = testing::gather(s.args.lse);
  const int64_t hq = s.args.out.size(1), dv = s.args.out.size(2), total = s.total_q();
  return batch_outputs(p.c, out, lse, poison_intact({out.begin() + total * hq * dv, out.end()}),
                       poison_intact({lse.begin() + total * hq, lse.end()}));
}

}  // namespace

void attach_gradient_terms(const HostProblem& p, Outputs& o) {
  if (p.c.family != Family::kBwd) return;
  std::vector<textbook::Backward> grads;
  textbook_attn(p, &grads, nullptr);
  for (size_t b = 0; b < grads.size(); ++b) {
    const std::string of = " of request " + std::to_string(b);
    for (Part& part : o) {
      if (part.name == "dq" + of) part.terms = grads[b].dq_terms;
      if (part.name == "dk" + of) part.terms = grads[b].dk_terms;
    }
  }
}

namespace {

Outputs api_attn(HostProblem& p) {
  testing::fwd_bwd::Bundle& t = *p.bundle;
  attention_fwd(t.fwd, p.c.attn.opts);
  if (p.c.family == Family::kBwd) attention_bwd(t.bwd, p.c.attn.opts);
  return read_attn(p);
}

Outputs api_decode(HostProblem& p) {
  decode(p.decode->args, p.decode->opts);
  return read_decode(p);
}

Outputs api_mla(HostProblem& p) {
  mla(p.mla->args, p.mla->opts);
  return read_mla(p);
}

Outputs api_merge(HostProblem& p) {
  const MergeRun& r = *p.merge;
  if (p.c.merge.n_way) {
    merge_states_n(r.many);
  } else {
    merge_states(r.two);
  }
  return read_merge(p);
}

// One BatchAttention made for the case's limits, one plan of the step, one run (CPU tensors:
// the CPU reference item by item through the plan, split rows merged).
Outputs api_batch(HostProblem& p) {
  const testing::batch_case::BatchStep& s = *p.batch;
  BatchAttention ba(testing::batch_case::config_of(p.c.batch.c));
  ba.plan(s.args.cu_seqlens_q, s.args.kv_lens);
  if (p.between_plan_and_run) p.between_plan_and_run();
  ba.run(s.args);
  return read_batch(p);
}

// ---------------------------------------------------------------- naive formulas

Outputs naive_attn(HostProblem& p) {
  const bool bwd = p.c.family == Family::kBwd;
  std::vector<textbook::Backward> grads;
  std::vector<double> dsinks;
  // The backward from the out and lse the problem's tensors hold, the public API's forward (it
  // runs first): the backward's contract is the gradients given the out and lse it is handed, and
  // where dS cancels they follow an ulp of difference there far past the gradients' rounding (bwd
  // seed 201009: 6 of 88 lse one fp32 ulp apart moved a dv element of 5e-8 by 5e-8).
  const std::vector<textbook::Forward> fwd =
      textbook_attn(p, bwd ? &grads : nullptr, &dsinks, /*from_stored=*/bwd);
  // Nothing writes the unowned rows: every element keeps its poison.
  const auto& s = p.attn->spec;
  const int64_t pad = p.c.attn.build.pad_rows;
  return attn_outputs(p.c, fwd, bwd ? &grads : nullptr, dsinks,
                      std::vector<double>(pad * s.hq * s.dv, 1.0),
                      std::vector<double>(pad * s.hq * s.dqk, 1.0));
}

Outputs naive_decode(HostProblem& p) {
  std::vector<double> out, lse;
  testing::naive::decode(testing::decode_case::naive_problem(*p.decode), out, lse);
  return decode_outputs(p.c, out, lse);
}

Outputs naive_mla(HostProblem& p) {
  std::vector<double> out, lse;
  testing::mla_case::naive_outputs(*p.mla, out, lse);
  return mla_outputs(p.c, out, lse);
}

Outputs naive_merge(HostProblem& p) {
  const MergeCase& m = p.c.merge;
  std::vector<double> out, lse;
  for (int t = 0; t < m.tokens; ++t) {
    for (int h = 0; h < m.heads; ++h) {
      const auto first = p.merge->states.begin() + (size_t(t) * m.heads + h) * m.n;
      const std::vector<testing::naive::State> states(first, first + m.n);
      const testing::naive::State s = testing::naive::merge_all(states, m.dim);
      out.insert(out.end(), s.o.begin(), s.o.end());
      lse.push_back(s.lse);
    }
  }
  return merge_outputs(p.c, out, lse);
}

// Each request alone through the textbook forward, its keys and values gathered from the pages
// (dequantized: stored * scale of the KV head).
Outputs naive_batch(HostProblem& p) {
  const testing::batch_case::BatchCase& b = p.c.batch.c;
  const testing::batch_case::BatchStep& s = *p.batch;
  textbook::Config cfg;
  cfg.hq = b.q_heads();
  cfg.hkv = b.kv_heads;
  cfg.dqk = b.head_dim;
  cfg.dv = b.dv();
  cfg.scale = b.scale ? double(*b.scale) : 1.0 / std::sqrt(double(b.head_dim));
  cfg.softcap = b.softcap;
  cfg.causal = b.causal;
  cfg.window_left = b.window.left;
  cfg.window_right = b.window.right;
  std::vector<double> sinks;
  if (b.sinks) sinks = testing::gather(s.args.sinks);
  std::vector<double> out, lse;
  for (size_t r = 0; r < b.q_lens.size(); ++r) {
    textbook::Request q;
    q.q_len = b.q_lens[r];
    q.kv_len = b.kv_lens[r];
    for (int64_t i = 0; i < q.q_len; ++i) {
      for (int64_t h = 0; h < cfg.hq; ++h) {
        for (int64_t d = 0; d < cfg.dqk; ++d) {
          q.q.push_back(load_element(s.args.q, s.args.q.offset({s.cu[r] + i, h, d})));
        }
      }
    }
    auto gather_pool = [&](const testing::decode_case::PagedKV& kv,
                           const std::vector<double>& scale, int64_t dim) {
      std::vector<double> x;
      for (int t = 0; t < q.kv_len; ++t) {
        for (int h = 0; h < b.kv_heads; ++h) {
          for (int d = 0; d < dim; ++d) {
            x.push_back(load_element(kv.k, kv.token_offset(int(r), t, h, d)) * scale[h]);
          }
        }
      }
      return x;
    };
    q.k = gather_pool(*s.k_cache, s.k_scale, cfg.dqk);
    q.v = gather_pool(*s.v_cache, s.v_scale, cfg.dv);
    const textbook::Forward f = textbook::forward(cfg, q, sinks);
    out.insert(out.end(), f.out.begin(), f.out.end());
    lse.insert(lse.end(), f.lse.begin(), f.lse.end());
  }
  // Nothing writes the rows past the step: every element keeps its poison.
  return batch_outputs(p.c, out, lse, std::vector<double>(b.pad_rows * cfg.hq * cfg.dv, 1.0),
                       std::vector<double>(b.pad_rows * cfg.hq, 1.0));
}

// One entry per family, in Family order.
Outputs dispatch(HostProblem& p, Outputs (*attn)(HostProblem&), Outputs (*dec)(HostProblem&),
                 Outputs (*ml)(HostProblem&), Outputs (*mrg)(HostProblem&),
                 Outputs (*bat)(HostProblem&)) {
  switch (p.c.family) {
    case Family::kFwd:
    case Family::kBwd:
      return attn(p);
    case Family::kDecode:
      return dec(p);
    case Family::kMla:
      return ml(p);
    case Family::kMerge:
      return mrg(p);
    case Family::kBatch:
      return bat(p);
  }
  return {};
}

}  // namespace

Implementation public_api() {
  return {"public API (CPU reference)", [](HostProblem& p) {
            return dispatch(p, api_attn, api_decode, api_mla, api_merge, api_batch);
          }};
}

Outputs read_outputs(HostProblem& p) {
  return dispatch(p, read_attn, read_decode, read_mla, read_merge, read_batch);
}

Implementation naive_formulas() {
  return {"naive formulas", [](HostProblem& p) {
            return dispatch(p, naive_attn, naive_decode, naive_mla, naive_merge, naive_batch);
          }};
}

}  // namespace hopattn::fuzz
