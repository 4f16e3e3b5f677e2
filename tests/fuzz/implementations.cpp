// The two CPU implementations of check.hpp. Both hand back their results through the same
// *_outputs() functions, so the parts line up name by name and element by element.
#include <cmath>
#include <vector>

#include "check.hpp"
#include "cpu/naive_decode.hpp"
#include "cpu/naive_fwd_bwd.hpp"
#include "cpu/naive_merge.hpp"
#include "hopattn/api.hpp"

namespace hopattn::fuzz {
namespace {

namespace textbook = testing::textbook;

Part part(std::string name, Part::Kind kind, DType dtype, std::vector<int64_t> shape,
          std::vector<double> values) {
  return {std::move(name), kind, dtype, std::move(shape), std::move(values)};
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
    o.push_back(part("out" + of, Part::Kind::kValue, s.dtype, {q, s.hq, s.dv}, fwd[b].out));
    o.push_back(part("lse" + of, Part::Kind::kLse, DType::kFP32, {q, s.hq}, fwd[b].lse));
    if (!grads) continue;
    const textbook::Backward& g = (*grads)[b];
    o.push_back(part("dq" + of, Part::Kind::kValue, s.dtype, {q, s.hq, s.dqk}, g.dq));
    o.push_back(part("dk" + of, Part::Kind::kValue, s.dtype, {k, s.hkv, s.dqk}, g.dk));
    o.push_back(part("dv" + of, Part::Kind::kValue, s.dtype, {k, s.hkv, s.dv}, g.dv));
  }
  if (grads && s.sinks) {
    o.push_back(part("dsinks", Part::Kind::kValue, DType::kFP32, {s.hq}, dsinks));
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
  return {part("out", Part::Kind::kValue, d.q_dtype, {d.batch, d.q_len, hq, d.head_dim}, out),
          part("lse", Part::Kind::kLse, DType::kFP32, {d.batch, d.q_len, hq}, lse)};
}

Outputs mla_outputs(const Case& c, std::vector<double> out, std::vector<double> lse) {
  const auto& m = c.mla.c;
  int64_t total_q = 0;
  for (int n : m.q_lens) total_q += n;
  return {part("out", Part::Kind::kValue, m.q_dtype, {total_q, m.heads, kMlaLatentDim}, out),
          part("lse", Part::Kind::kLse, DType::kFP32, {total_q, m.heads}, lse)};
}

Outputs merge_outputs(const Case& c, std::vector<double> out, std::vector<double> lse) {
  const MergeCase& m = c.merge;
  return {part("out", Part::Kind::kValue, m.out_dtype, {m.tokens, m.heads, m.dim}, out),
          part("lse", Part::Kind::kLse, DType::kFP32, {m.tokens, m.heads}, lse)};
}

// ---------------------------------------------------------------- public API

Outputs api_attn(HostProblem& p) {
  testing::fwd_bwd::Bundle& t = *p.bundle;
  attention_fwd(t.fwd, p.c.attn.opts);
  const bool bwd = p.c.family == Family::kBwd;
  if (bwd) attention_bwd(t.bwd, p.c.attn.opts);
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

Outputs api_decode(HostProblem& p) {
  decode(p.decode->args, p.decode->opts);
  std::vector<double> out, lse;
  testing::decode_case::read_outputs(*p.decode, out, lse);
  return decode_outputs(p.c, out, lse);
}

Outputs api_mla(HostProblem& p) {
  mla(p.mla->args, p.mla->opts);
  std::vector<double> out, lse;
  testing::mla_case::read_outputs(*p.mla, out, lse);
  return mla_outputs(p.c, out, lse);
}

Outputs api_merge(HostProblem& p) {
  const MergeRun& r = *p.merge;
  const bool n_way = p.c.merge.n_way;
  if (n_way) {
    merge_states_n(r.many);
  } else {
    merge_states(r.two);
  }
  const TensorView& o = n_way ? r.many.out : r.two.out;
  const TensorView& l = n_way ? r.many.lse_out : r.two.lse;
  const std::vector<double> out = testing::gather(o), lse = testing::gather(l);
  return merge_outputs(p.c, out, lse);
}

// ---------------------------------------------------------------- naive formulas

Outputs naive_attn(HostProblem& p) {
  const testing::fwd_bwd::Problem& prob = *p.attn;
  const textbook::Config cfg = testing::fwd_bwd::naive_config(prob.spec, p.c.attn.opts);
  const bool bwd = p.c.family == Family::kBwd;
  std::vector<textbook::Forward> fwd;
  std::vector<textbook::Backward> grads;
  std::vector<double> dsinks(prob.spec.sinks ? prob.spec.hq : 0, 0.0);
  for (const textbook::Request& r : prob.requests) {
    fwd.push_back(textbook::forward(cfg, r, prob.sinks));
    if (!bwd) continue;
    grads.push_back(textbook::backward(cfg, r, prob.sinks));
    for (size_t h = 0; h < dsinks.size(); ++h) dsinks[h] += grads.back().dsinks[h];
  }
  // Nothing writes the unowned rows: every element keeps its poison.
  const auto& s = prob.spec;
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

// One entry per family, in Family order.
Outputs dispatch(HostProblem& p, Outputs (*attn)(HostProblem&), Outputs (*dec)(HostProblem&),
                 Outputs (*ml)(HostProblem&), Outputs (*mrg)(HostProblem&)) {
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
  }
  return {};
}

}  // namespace

Implementation public_api() {
  return {"public API (CPU reference)",
          [](HostProblem& p) { return dispatch(p, api_attn, api_decode, api_mla, api_merge); }};
}

Implementation naive_formulas() {
  return {"naive formulas", [](HostProblem& p) {
            return dispatch(p, naive_attn, naive_decode, naive_mla, naive_merge);
          }};
}

}  // namespace hopattn::fuzz
