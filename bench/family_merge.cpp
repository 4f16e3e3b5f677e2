// merge: two attention states (o [T, H, D], lse [T, H]) into one. On the CPU the states are the
// forward over each half of the keys, and the merge is checked against the forward over all of
// them. On the GPU they are random, and the check is the CPU reference on the first rows.
#include "device.hpp"
#include "family_util.hpp"
#include "hopattn/api.hpp"
#include "reference/reference.hpp"
#include "runner.hpp"

namespace hopattn::cli {
namespace {

constexpr int64_t kCheckRows = 1024;

class MergeWorkload final : public Workload {
 public:
  MergeWorkload(const Shape& s, uint64_t seed, bool cpu) : s_(s) {
    const int64_t T = int64_t{s.batch} * s.q_len, H = s.q_heads, D = s.head_dim;
    for (Tensor* t : {&o_a_, &o_b_, &out_}) *t = Tensor(s.dtype, {T, H, D});
    for (Tensor* t : {&lse_a_, &lse_b_, &lse_}) *t = Tensor(DType::kFP32, {T, H});
    if (cpu) {
      split_forward(seed);
    } else {
      fill_random(o_a_, -1.0, 1.0, seed);
      fill_random(o_b_, -1.0, 1.0, seed + 1);
      fill_random(lse_a_, -4.0, 4.0, seed + 2);
      fill_random(lse_b_, -4.0, 4.0, seed + 3);
    }
  }

  void prepare(bool device) override {
    if (!device) return;
    for (Tensor* t : {&o_a_, &o_b_, &out_, &lse_a_, &lse_b_, &lse_}) t->to_device();
  }

  void poison_outputs(bool device) override {
    out_.poison(device ? Side::kDevice : Side::kHost);
    lse_.poison(device ? Side::kDevice : Side::kHost);
  }

  void run(Impl impl) override {
    merge_states(args(impl == Impl::kCpu ? Side::kHost : Side::kDevice));
  }

  Check check_cpu() override {
    return judge_out_lse(out_.host(), whole_out_.host(), lse_.host(), whole_lse_.host());
  }

  Check check_gpu() override {
    out_.from_device();
    lse_.from_device();
    const int64_t rows = std::min<int64_t>(out_.shape()[0], kCheckRows);
    auto first = [&](const Tensor& t) { return narrow(t.host(), 0, 0, rows); };
    Tensor out(s_.dtype, {rows, s_.q_heads, s_.head_dim}), lse(DType::kFP32, {rows, s_.q_heads});
    MergeArgs a;
    a.o_a = first(o_a_);
    a.lse_a = first(lse_a_);
    a.o_b = first(o_b_);
    a.lse_b = first(lse_b_);
    a.out = out.host();
    a.lse = lse.host();
    reference::merge_states(a);
    return judge_out_lse(first(out_), out.host(), first(lse_), lse.host());
  }

  std::string cpu_check_note() const override {
    return "merge cpu-ref: states of the forward over each half of the keys, vs the forward over "
           "all of them";
  }
  std::string gpu_check_note() const override {
    return "merge GPU rows: vs the CPU reference on the first " +
           std::to_string(std::min<int64_t>(out_.shape()[0], kCheckRows)) + " rows";
  }

 private:
  // o_a/o_b: the forward of q [B, Sq, H, D] over keys [0, Sk/2) and [Sk/2, Sk) (no mask); the
  // whole forward is what their merge must give. [B, Sq, H, .] and [T, H, .] share memory order.
  void split_forward(uint64_t seed) {
    const Shape& s = s_;
    const int64_t B = s.batch, Sq = s.q_len, Sk = std::max(s.kv_len, 2), D = s.head_dim;
    Tensor q(s.dtype, {B, Sq, s.q_heads, D});
    Tensor k(s.dtype, {B, Sk, s.kv_heads, D}), v(s.dtype, {B, Sk, s.kv_heads, D});
    fill_random(q, -2.0, 2.0, seed);
    fill_random(k, -2.0, 2.0, seed + 1);
    fill_random(v, -1.0, 1.0, seed + 2);
    whole_out_ = Tensor(s.dtype, out_.shape());
    whole_lse_ = Tensor(DType::kFP32, lse_.shape());
    const int64_t half = Sk / 2;
    const struct {
      int64_t start, len;
      Tensor* out;
      Tensor* lse;
    } parts[] = {{0, half, &o_a_, &lse_a_},
                 {half, Sk - half, &o_b_, &lse_b_},
                 {0, Sk, &whole_out_, &whole_lse_}};
    for (const auto& part : parts) {
      FwdArgs a;
      a.q = q.host();
      a.k = narrow(k.host(), 1, part.start, part.len);
      a.v = narrow(v.host(), 1, part.start, part.len);
      a.out = reshape(part.out->host(), {B, Sq, s.q_heads, D});
      a.lse = reshape(part.lse->host(), {B, Sq, s.q_heads});
      reference::attention_fwd(a, {});
    }
  }

  MergeArgs args(Side side) const {
    MergeArgs a;
    a.o_a = o_a_.view(side);
    a.lse_a = lse_a_.view(side);
    a.o_b = o_b_.view(side);
    a.lse_b = lse_b_.view(side);
    a.out = out_.view(side);
    a.lse = lse_.view(side);
    return a;
  }

  Shape s_;
  Tensor o_a_, o_b_, lse_a_, lse_b_, out_, lse_, whole_out_, whole_lse_;
};

}  // namespace

std::unique_ptr<Workload> make_merge_workload(const Shape& s, uint64_t seed, bool cpu) {
  return std::make_unique<MergeWorkload>(s, seed, cpu);
}

}  // namespace hopattn::cli
