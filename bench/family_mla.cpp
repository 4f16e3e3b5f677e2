// mla: DeepSeek latent attention, q_nope [T, H, 512] + q_pe [T, H, 64] over a paged latent cache
// ckv [P, ps, 512] + kpe [P, ps, 64]. CPU check: the forward reference as MQA with q = [q_nope,
// q_pe], k = [ckv, kpe] (576) and v = ckv (512), contiguous. GPU check: the CPU reference on the
// first requests and the first 16 heads.
#include <cstring>

#include "common/element_access.hpp"
#include "family_util.hpp"
#include "hopattn/api.hpp"
#include "reference/reference.hpp"
#include "runner.hpp"

namespace hopattn::cli {
namespace {

constexpr int64_t kCheckRequests = 2;
constexpr int64_t kCheckHeads = 16;
constexpr int kLatent = kMlaLatentDim, kRope = kMlaRopeDim;

class MlaWorkload final : public Workload {
 public:
  MlaWorkload(const Shape& s, uint64_t seed) : s_(s) {
    opts_.causal = s.causal;
    opts_.num_splits = s.num_splits;
    opts_.schedule = s.mla_schedule;
    const int64_t T = int64_t{s.batch} * s.q_len, H = s.q_heads;
    const int ps = s.page_size > 0 ? s.page_size : 64;
    const int64_t pages = ceil_div(s.kv_len, ps);
    q_nope_ = Tensor(s.dtype, {T, H, kLatent});
    q_pe_ = Tensor(s.dtype, {T, H, kRope});
    out_ = Tensor(s.dtype, {T, H, kLatent});
    lse_ = Tensor(DType::kFP32, {T, H});
    fp8_ = s.kv_dtype == DType::kFP8E4M3;
    ckv_ = Tensor(s.kv_dtype, {s.batch * pages, ps, kLatent});
    kpe_ = Tensor(s.kv_dtype, {s.batch * pages, ps, kRope});
    cu_q_ = uniform_cu_seqlens(s.batch, s.q_len);
    block_table_ = pool_block_table(s.batch, pages, s.pages_in_order, seed + 4);
    kv_lens_ = int32_tensor(std::vector<int32_t>(s.batch, s.kv_len));
    fill_random(q_nope_, -1.0, 1.0, seed);
    fill_random(q_pe_, -1.0, 1.0, seed + 1);
    fill_random(ckv_, -kv_range(), kv_range(), seed + 2);
    fill_random(kpe_, -kv_range(), kv_range(), seed + 3);
  }

  void prepare(bool device) override {
    if (!device) return;
    for (Tensor* t :
         {&q_nope_, &q_pe_, &out_, &lse_, &ckv_, &kpe_, &cu_q_, &block_table_, &kv_lens_}) {
      t->to_device();
    }
    const size_t bytes = mla_workspace_size(args(Side::kDevice), opts_);
    if (bytes > 0) workspace_ = DeviceMemory(bytes);  // split partial states; no zeroing needed
  }

  void poison_outputs(bool device) override {
    out_.poison(device ? Side::kDevice : Side::kHost);
    lse_.poison(device ? Side::kDevice : Side::kHost);
  }

  void run(Impl impl) override {
    MlaArgs a = args(impl == Impl::kCpu ? Side::kHost : Side::kDevice);
    if (impl != Impl::kCpu) a.workspace = {workspace_.data(), workspace_.bytes()};
    mla(a, opts_);
  }

  Check check_cpu() override {
    const Shape& s = s_;
    const int64_t T = int64_t{s.batch} * s.q_len, H = s.q_heads,
                  total_kv = int64_t{s.batch} * s.kv_len;
    const int64_t ps = ckv_.shape()[1];
    const size_t elt = dtype_size(s.dtype);
    Tensor q(s.dtype, {T, H, kLatent + kRope}), k(s.dtype, {total_kv, 1, kLatent + kRope});
    Tensor v(s.dtype, {total_kv, 1, kLatent});
    auto* qd = static_cast<char*>(q.host_data());
    for (int64_t r = 0; r < T * H; ++r) {
      std::memcpy(qd + r * (kLatent + kRope) * elt,
                  static_cast<const char*>(q_nope_.host_data()) + r * kLatent * elt, kLatent * elt);
      std::memcpy(qd + (r * (kLatent + kRope) + kLatent) * elt,
                  static_cast<const char*>(q_pe_.host_data()) + r * kRope * elt, kRope * elt);
    }
    // k = [ckv, kpe] and v = ckv, element by element (an fp8 cache is dequantized on the way).
    const TensorView kh = k.host(), vh = v.host(), ch = ckv_.host(), ph = kpe_.host();
    const double kv_scale = this->kv_scale();
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t t = 0; t < s.kv_len; ++t) {
        const int64_t slot = page_of(block_table_, b, t, ps) * ps + t % ps;
        const int64_t row = b * s.kv_len + t;
        for (int64_t d = 0; d < kLatent; ++d) {
          const double x = load_element(ch, slot * kLatent + d) * kv_scale;
          store_element(kh, row * (kLatent + kRope) + d, x);
          store_element(vh, row * kLatent + d, x);
        }
        for (int64_t d = 0; d < kRope; ++d) {
          store_element(kh, row * (kLatent + kRope) + kLatent + d,
                        load_element(ph, slot * kRope + d) * kv_scale);
        }
      }
    }
    Tensor out(s.dtype, out_.shape()), lse(DType::kFP32, lse_.shape());
    Tensor cu_k = uniform_cu_seqlens(s.batch, s.kv_len);
    FwdArgs a;
    a.q = q.host();
    a.k = k.host();
    a.v = v.host();
    a.cu_seqlens_q = cu_q_.host();
    a.cu_seqlens_k = cu_k.host();
    a.max_seqlen_q = s.q_len;
    a.max_seqlen_k = s.kv_len;
    a.out = out.host();
    a.lse = lse.host();
    AttentionOptions o;
    o.causal = s.causal;
    o.scale = opts_.scale;  // unset: 1 / sqrt(576), the MLA default, as the forward's own
    reference::attention_fwd(a, o);
    return judge_out_lse(out_.host(), out.host(), lse_.host(), lse.host());
  }

  Check check_gpu() override {
    out_.from_device();
    lse_.from_device();
    const Shape& s = s_;
    const int64_t nb = std::min<int64_t>(s.batch, kCheckRequests);
    const int64_t hs = std::min<int64_t>(s.q_heads, kCheckHeads);
    const int64_t rows = nb * s.q_len;
    auto sub = [&](const TensorView& t) { return narrow(narrow(t, 0, 0, rows), 1, 0, hs); };
    Tensor out(s.dtype, {rows, hs, kLatent}), lse(DType::kFP32, {rows, hs});
    MlaArgs a = args(Side::kHost);
    a.q_nope = sub(q_nope_.host());
    a.q_pe = sub(q_pe_.host());
    a.cu_seqlens_q = narrow(cu_q_.host(), 0, 0, nb + 1);
    a.pages.block_table = narrow(block_table_.host(), 0, 0, nb);
    a.pages.kv_lens = narrow(kv_lens_.host(), 0, 0, nb);
    a.out = out.host();
    a.lse = lse.host();
    reference::mla(a, opts_);
    return judge_out_lse(sub(out_.host()), out.host(), sub(lse_.host()), lse.host());
  }

  std::string cpu_check_note() const override {
    return "mla cpu-ref: vs the forward reference as MQA over [ckv, kpe] (576) / ckv (512)";
  }
  std::string gpu_check_note() const override {
    return "mla GPU rows: vs the CPU reference on the first " +
           std::to_string(std::min<int64_t>(s_.batch, kCheckRequests)) + " requests, first " +
           std::to_string(std::min<int64_t>(s_.q_heads, kCheckHeads)) + " heads";
  }

 private:
  MlaArgs args(Side side) const {
    MlaArgs a;
    a.q_nope = q_nope_.view(side);
    a.q_pe = q_pe_.view(side);
    a.ckv = ckv_.view(side);
    a.kpe = kpe_.view(side);
    a.cu_seqlens_q = cu_q_.view(side);
    a.max_seqlen_q = s_.q_len;
    a.pages.block_table = block_table_.view(side);
    a.pages.kv_lens = kv_lens_.view(side);
    a.out = out_.view(side);
    a.lse = lse_.view(side);
    a.kv_scale = kv_scale();
    return a;
  }

  // An fp8 cache stores values up to 8 with kv_scale 1/8, so real values lie in [-1, 1).
  float kv_scale() const { return fp8_ ? 0.125f : 1.f; }
  double kv_range() const { return 1.0 / kv_scale(); }

  Shape s_;
  bool fp8_ = false;
  DeviceMemory workspace_;
  MlaOptions opts_;
  Tensor q_nope_, q_pe_, out_, lse_, ckv_, kpe_, cu_q_, block_table_, kv_lens_;
};

}  // namespace

std::unique_ptr<Workload> make_mla_workload(const Shape& s, uint64_t seed) {
  return std::make_unique<MlaWorkload>(s, seed);
}

}  // namespace hopattn::cli
