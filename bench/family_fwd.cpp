// fwd: dense [B, S, H, D] or paged KV (varlen q); D is Dqk for q and k, Dv for v and out. CPU
// check: the same problem with the other KV addressing (dense <-> paged) and every KV head repeated
// for its q heads (MHA). GPU check: the CPU reference on the last rows of request 0 for the first
// and last KV head groups.
#include <cstring>
#include <set>

#include "api/launch_variants.hpp"
#include "device.hpp"
#include "family_util.hpp"
#include "hopattn/api.hpp"
#include "reference/reference.hpp"
#include "runner.hpp"

namespace hopattn::cli {
namespace {

constexpr int kAltPageSize = 16;    // page size of the paged form the dense problem is checked by
constexpr int64_t kCheckRows = 64;  // query rows of request 0 the GPU check recomputes

class FwdWorkload final : public Workload {
 public:
  FwdWorkload(const Shape& s, uint64_t seed) : s_(s), seed_(seed) {
    set_mask(opts_, s);
    opts_.pack_gqa = s.pack_gqa;
    const int64_t B = s.batch, Sq = s.q_len, Sk = s.kv_len, D = s.head_dim, Dv = s.dv();
    if (paged()) {
      const int64_t pages = ceil_div(Sk, s.page_size);
      q_ = Tensor(s.dtype, {B * Sq, s.q_heads, D});
      out_ = Tensor(s.dtype, {B * Sq, s.q_heads, Dv});
      lse_ = Tensor(DType::kFP32, {B * Sq, s.q_heads});
      k_ = Tensor(s.dtype, {B * pages, s.page_size, s.kv_heads, D});
      v_ = Tensor(s.dtype, {B * pages, s.page_size, s.kv_heads, Dv});
      cu_q_ = uniform_cu_seqlens(s.batch, s.q_len);
      block_table_ = pool_block_table(s.batch, pages, s.pages_in_order, seed + 3);
      kv_lens_ = int32_tensor(std::vector<int32_t>(s.batch, s.kv_len));
    } else {
      q_ = Tensor(s.dtype, {B, Sq, s.q_heads, D});
      out_ = Tensor(s.dtype, {B, Sq, s.q_heads, Dv});
      lse_ = Tensor(DType::kFP32, {B, Sq, s.q_heads});
      k_ = Tensor(s.dtype, {B, Sk, s.kv_heads, D});
      v_ = Tensor(s.dtype, {B, Sk, s.kv_heads, Dv});
    }
    fill_random(q_, -2.0, 2.0, seed);
    fill_random(k_, -2.0, 2.0, seed + 1);
    fill_random(v_, -1.0, 1.0, seed + 2);
  }

  void prepare(bool device) override {
    if (!device) return;
    for (Tensor* t : {&q_, &k_, &v_, &out_, &lse_, &cu_q_, &block_table_, &kv_lens_}) {
      t->to_device();
    }
  }

  void poison_outputs(bool device) override {
    out_.poison(device ? Side::kDevice : Side::kHost);
    lse_.poison(device ? Side::kDevice : Side::kHost);
  }

  void run(Impl impl) override {
    switch (impl) {
      case Impl::kCpu:
        return attention_fwd(args(Side::kHost), opts_);
      case Impl::kNaive:
        return naive_fwd(args(Side::kDevice), opts_);
      default:
        return internal::attention_fwd(args(Side::kDevice), opts_, nullptr, s_.fwd_launch);
    }
  }

  Check check_cpu() override {
    const Shape& s = s_;
    const int ratio = s.q_heads / s.kv_heads;
    // The other addressing, with q heads' own copies of their KV head.
    const int alt_ps = paged() ? 0 : kAltPageSize;
    const int64_t alt_pages = alt_ps ? ceil_div(s.kv_len, alt_ps) : 0;
    auto kv_shape = [&](int64_t dim) {
      return alt_ps ? std::vector<int64_t>{s.batch * alt_pages, alt_ps, s.q_heads, dim}
                    : std::vector<int64_t>{s.batch, s.kv_len, s.q_heads, dim};
    };
    Tensor k(s.dtype, kv_shape(s.head_dim)), v(s.dtype, kv_shape(s.dv()));
    Tensor table =
        alt_ps ? pool_block_table(s.batch, alt_pages, /*in_order=*/false, seed_ + 7) : Tensor();
    // Row sizes of K (Dqk) and V (Dv), which differ for (192, 128).
    const size_t k_row = s.head_dim * dtype_size(s.dtype), v_row = s.dv() * dtype_size(s.dtype);
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t t = 0; t < s.kv_len; ++t) {
        for (int64_t h = 0; h < s.q_heads; ++h) {
          const int64_t src = row_index(table_or_null(), s.page_size, s.kv_heads, b, t, h / ratio);
          const int64_t dst = row_index(alt_ps ? &table : nullptr, alt_ps, s.q_heads, b, t, h);
          std::memcpy(static_cast<char*>(k.host_data()) + dst * k_row,
                      static_cast<const char*>(k_.host_data()) + src * k_row, k_row);
          std::memcpy(static_cast<char*>(v.host_data()) + dst * v_row,
                      static_cast<const char*>(v_.host_data()) + src * v_row, v_row);
        }
      }
    }
    // q, out and lse are contiguous in both forms: [B, Sq, ...] and [B * Sq, ...] share one
    // memory order, so the primary's q serves reshaped and the outputs compare element-wise.
    const int64_t rows = int64_t{s.batch} * s.q_len;
    auto q_shape = [&](int64_t dim) {
      return alt_ps ? std::vector<int64_t>{rows, s.q_heads, dim}
                    : std::vector<int64_t>{s.batch, s.q_len, s.q_heads, dim};
    };
    const std::vector<int64_t> out_shape = q_shape(s.dv());
    std::vector<int64_t> lse_shape(out_shape.begin(), out_shape.end() - 1);
    Tensor out(s.dtype, out_shape), lse(DType::kFP32, lse_shape);
    Tensor cu_q, kv_lens;
    FwdArgs a;
    a.q = reshape(q_.host(), q_shape(s.head_dim));
    a.out = out.host();
    a.lse = lse.host();
    if (alt_ps) {
      cu_q = uniform_cu_seqlens(s.batch, s.q_len);
      kv_lens = int32_tensor(std::vector<int32_t>(s.batch, s.kv_len));
      a.cu_seqlens_q = cu_q.host();
      a.max_seqlen_q = s.q_len;
      a.max_seqlen_k = s.kv_len;
      a.pages.block_table = table.host();
      a.pages.kv_lens = kv_lens.host();
    }
    a.k = k.host();
    a.v = v.host();
    reference::attention_fwd(a, opts_);
    return judge_out_lse(out_.host(), out.host(), lse_.host(), lse.host());
  }

  Check check_gpu() override {
    out_.from_device();
    lse_.from_device();
    const Shape& s = s_;
    const int ratio = s.q_heads / s.kv_heads;
    const int64_t R = std::min<int64_t>(s.q_len, kCheckRows);
    ErrorStats e_out, e_lse;
    for (int64_t g : std::set<int64_t>{0, s.kv_heads - 1}) {
      // Request 0's last R rows (the mask aligns bottom-right, so they see exactly what they saw
      // in the whole problem) and the q heads of KV head g.
      auto rows = [&](const TensorView& t) {
        const TensorView r = paged() ? varlen_rows_as_dense(t, s.q_len - R, R)
                                     : narrow(narrow(t, 0, 0, 1), 1, s.q_len - R, R);
        return narrow(r, 2, g * ratio, ratio);
      };
      auto lse_rows = [&](const TensorView& t) {
        const TensorView r = paged() ? restride(narrow(t, 0, s.q_len - R, R), {1, R, s.q_heads},
                                                {R * t.stride(0), t.stride(0), t.stride(1)})
                                     : narrow(narrow(t, 0, 0, 1), 1, s.q_len - R, R);
        return narrow(r, 2, g * ratio, ratio);
      };
      Tensor out(s.dtype, {1, R, ratio, s.dv()}), lse(DType::kFP32, {1, R, ratio});
      FwdArgs a;
      a.q = rows(q_.host());
      a.out = out.host();
      a.lse = lse.host();
      if (paged()) {
        a.k = narrow(k_.host(), 2, g, 1);
        a.v = narrow(v_.host(), 2, g, 1);
        a.pages.block_table = narrow(block_table_.host(), 0, 0, 1);
        a.pages.kv_lens = narrow(kv_lens_.host(), 0, 0, 1);
      } else {
        a.k = narrow(narrow(k_.host(), 0, 0, 1), 2, g, 1);
        a.v = narrow(narrow(v_.host(), 0, 0, 1), 2, g, 1);
      }
      reference::attention_fwd(a, opts_);
      e_out.merge(compare_views(rows(out_.host()), out.host()));
      e_lse.merge(compare_views(lse_rows(lse_.host()), lse.host()));
    }
    return judge(e_out, &e_lse);
  }

  std::string cpu_check_note() const override {
    return paged() ? "fwd cpu-ref: vs the same problem with dense KV, KV heads repeated (MHA)"
                   : "fwd cpu-ref: vs the same problem with paged KV, KV heads repeated (MHA)";
  }
  std::string gpu_check_note() const override {
    return "fwd GPU rows: vs the CPU reference on request 0's last " +
           std::to_string(std::min<int64_t>(s_.q_len, kCheckRows)) +
           " rows, first and last KV head groups";
  }

 private:
  bool paged() const { return s_.page_size > 0; }
  const Tensor* table_or_null() const { return paged() ? &block_table_ : nullptr; }

  // Row (b, t, h) of a K/V tensor, counted in head-dim vectors (D: Dqk for K, Dv for V): dense
  // [B, Sk, H, D], or an NHD pool [P, ps, H, D] through `table`.
  int64_t row_index(const Tensor* table, int page_size, int heads, int64_t b, int64_t t,
                    int64_t h) const {
    if (table == nullptr) return (b * s_.kv_len + t) * heads + h;
    const int64_t page = page_of(*table, b, t, page_size);
    return (page * page_size + t % page_size) * heads + h;
  }

  FwdArgs args(Side side) const {
    FwdArgs a;
    a.q = q_.view(side);
    a.k = k_.view(side);
    a.v = v_.view(side);
    a.out = out_.view(side);
    a.lse = lse_.view(side);
    if (paged()) {
      a.cu_seqlens_q = cu_q_.view(side);
      a.max_seqlen_q = s_.q_len;
      a.max_seqlen_k = s_.kv_len;
      a.pages.block_table = block_table_.view(side);
      a.pages.kv_lens = kv_lens_.view(side);
    }
    return a;
  }

  Shape s_;
  uint64_t seed_;
  AttentionOptions opts_;
  Tensor q_, k_, v_, out_, lse_, cu_q_, block_table_, kv_lens_;
};

}  // namespace

std::unique_ptr<Workload> make_fwd_workload(const Shape& s, uint64_t seed) {
  return std::make_unique<FwdWorkload>(s, seed);
}

}  // namespace hopattn::cli
