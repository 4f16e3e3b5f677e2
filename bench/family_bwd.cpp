// bwd: dense [B, S, H, D] (D: Dqk for q, k, dq, dk; Dv for v, out, dout, dv); out and lse come
// from a forward on the same side (untimed). CPU check: the MHA problem with every KV head
// repeated for its q heads, whose dK/dV summed over each group must equal GQA's. GPU check: the
// CPU reference on request 0 and the first KV head group.
#include "api/launch_variants.hpp"
#include "common/element_access.hpp"
#include "device.hpp"
#include "family_util.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "reference/reference.hpp"
#include "runner.hpp"

namespace hopattn::cli {
namespace {

class BwdWorkload final : public Workload {
 public:
  BwdWorkload(const Shape& s, uint64_t seed) : s_(s) {
    set_mask(opts_, s);
    opts_.deterministic = s.deterministic;
    const int64_t B = s.batch, Sq = s.q_len, Sk = s.kv_len, D = s.head_dim, Dv = s.dv();
    for (Tensor* t : {&q_, &dq_}) *t = Tensor(s.dtype, {B, Sq, s.q_heads, D});
    for (Tensor* t : {&out_, &dout_}) *t = Tensor(s.dtype, {B, Sq, s.q_heads, Dv});
    for (Tensor* t : {&k_, &dk_}) *t = Tensor(s.dtype, {B, Sk, s.kv_heads, D});
    for (Tensor* t : {&v_, &dv_}) *t = Tensor(s.dtype, {B, Sk, s.kv_heads, Dv});
    lse_ = Tensor(DType::kFP32, {B, Sq, s.q_heads});
    fill_random(q_, -2.0, 2.0, seed);
    fill_random(k_, -2.0, 2.0, seed + 1);
    fill_random(v_, -1.0, 1.0, seed + 2);
    fill_random(dout_, -1.0, 1.0, seed + 3);
  }

  void prepare(bool device) override {
    if (!device) {
      reference::attention_fwd(args(Side::kHost).fwd, opts_);
      return;
    }
    for (Tensor* t : {&q_, &k_, &v_, &out_, &lse_, &dout_, &dq_, &dk_, &dv_}) t->to_device();
    // The forward whose out and lse the backward takes: the kernel, else the naive reference.
    try {
      attention_fwd(args(Side::kDevice).fwd, opts_);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotImplemented) throw;
      naive_fwd(args(Side::kDevice).fwd, opts_);
    }
    const size_t bytes = attention_bwd_workspace_size(args(Side::kDevice), opts_);
    if (bytes > 0) workspace_ = DeviceMemory(bytes);
  }

  void poison_outputs(bool device) override {
    for (Tensor* t : {&dq_, &dk_, &dv_}) t->poison(device ? Side::kDevice : Side::kHost);
  }

  void run(Impl impl) override {
    if (impl == Impl::kCpu) return attention_bwd(args(Side::kHost), opts_);
    BwdArgs a = args(Side::kDevice);
    a.workspace = {workspace_.data(), workspace_.bytes()};
    internal::attention_bwd(a, opts_, nullptr, s_.bwd_launch);
  }

  Check check_cpu() override {
    const Shape& s = s_;
    const int ratio = s.q_heads / s.kv_heads;
    const std::vector<int64_t> mha_k = {s.batch, s.kv_len, s.q_heads, s.head_dim};
    const std::vector<int64_t> mha_v = {s.batch, s.kv_len, s.q_heads, s.dv()};
    Tensor k(s.dtype, mha_k), v(s.dtype, mha_v), dk(s.dtype, mha_k), dv(s.dtype, mha_v);
    Tensor dq(s.dtype, q_.shape());
    repeat_heads(k_, k, ratio);
    repeat_heads(v_, v, ratio);
    BwdArgs a = args(Side::kHost);
    a.fwd.k = k.host();
    a.fwd.v = v.host();
    a.dq = dq.host();
    a.dk = dk.host();
    a.dv = dv.host();
    reference::attention_bwd(a, opts_);
    // GQA's dK/dV of a KV head = the sum of the MHA copies' over its group.
    ErrorStats e = compare_views(dq_.host(), dq.host());
    e.merge(compare_views(dk_.host(), group_sum(dk, ratio).host()));
    e.merge(compare_views(dv_.host(), group_sum(dv, ratio).host()));
    return judge(e, nullptr);
  }

  Check check_gpu() override {
    for (Tensor* t : {&out_, &lse_, &dq_, &dk_, &dv_}) t->from_device();
    const Shape& s = s_;
    const int ratio = s.q_heads / s.kv_heads;
    auto q_side = [&](const TensorView& t) { return narrow(narrow(t, 0, 0, 1), 2, 0, ratio); };
    auto kv_side = [&](const TensorView& t) { return narrow(narrow(t, 0, 0, 1), 2, 0, 1); };
    Tensor dq(s.dtype, {1, s.q_len, ratio, s.head_dim});
    Tensor dk(s.dtype, {1, s.kv_len, 1, s.head_dim}), dv(s.dtype, {1, s.kv_len, 1, s.dv()});
    BwdArgs a;
    a.fwd.q = q_side(q_.host());
    a.fwd.k = kv_side(k_.host());
    a.fwd.v = kv_side(v_.host());
    a.fwd.out = q_side(out_.host());
    a.fwd.lse = narrow(narrow(lse_.host(), 0, 0, 1), 2, 0, ratio);
    a.dout = q_side(dout_.host());
    a.dq = dq.host();
    a.dk = dk.host();
    a.dv = dv.host();
    reference::attention_bwd(a, opts_);
    ErrorStats e = compare_views(q_side(dq_.host()), dq.host());
    e.merge(compare_views(kv_side(dk_.host()), dk.host()));
    e.merge(compare_views(kv_side(dv_.host()), dv.host()));
    return judge(e, nullptr);
  }

  std::string cpu_check_note() const override {
    return "bwd cpu-ref: vs MHA with KV heads repeated (dK, dV summed over each group)";
  }
  std::string gpu_check_note() const override {
    return "bwd GPU rows: vs the CPU reference on request 0, first KV head group";
  }

 private:
  // dst [B, S, Hq, D] gets src [B, S, Hkv, D]'s head h / ratio as its head h.
  static void repeat_heads(const Tensor& src, Tensor& dst, int ratio) {
    const TensorView s = src.host(), d = dst.host();
    for (int64_t b = 0; b < d.size(0); ++b) {
      for (int64_t t = 0; t < d.size(1); ++t) {
        for (int64_t h = 0; h < d.size(2); ++h) {
          for (int64_t x = 0; x < d.size(3); ++x) {
            store_element(d, d.offset({b, t, h, x}),
                          load_element(s, s.offset({b, t, h / ratio, x})));
          }
        }
      }
    }
  }

  // fp32 [B, S, Hq / ratio, D]: the sum over each group of `ratio` heads of t [B, S, Hq, D].
  static Tensor group_sum(const Tensor& t, int ratio) {
    const TensorView v = t.host();
    Tensor sum(DType::kFP32, {v.size(0), v.size(1), v.size(2) / ratio, v.size(3)});
    const TensorView o = sum.host();
    for (int64_t b = 0; b < o.size(0); ++b) {
      for (int64_t s = 0; s < o.size(1); ++s) {
        for (int64_t g = 0; g < o.size(2); ++g) {
          for (int64_t x = 0; x < o.size(3); ++x) {
            double acc = 0;
            for (int r = 0; r < ratio; ++r)
              acc += load_element(v, v.offset({b, s, g * ratio + r, x}));
            store_element(o, o.offset({b, s, g, x}), acc);
          }
        }
      }
    }
    return sum;
  }

  BwdArgs args(Side side) const {
    BwdArgs a;
    a.fwd.q = q_.view(side);
    a.fwd.k = k_.view(side);
    a.fwd.v = v_.view(side);
    a.fwd.out = out_.view(side);
    a.fwd.lse = lse_.view(side);
    a.dout = dout_.view(side);
    a.dq = dq_.view(side);
    a.dk = dk_.view(side);
    a.dv = dv_.view(side);
    return a;
  }

  Shape s_;
  AttentionOptions opts_;
  Tensor q_, k_, v_, out_, lse_, dout_, dq_, dk_, dv_;
  DeviceMemory workspace_;
};

}  // namespace

std::unique_ptr<Workload> make_bwd_workload(const Shape& s, uint64_t seed) {
  return std::make_unique<BwdWorkload>(s, seed);
}

}  // namespace hopattn::cli
