// batch: one serving step (prefill chunks and decodes, bench/step.hpp) over one paged NHD cache
// with shuffled pages, q [total_q, Hq, D]. Computed by BatchAttention (planned in prepare(); the
// timed call is run() alone), or by the alternatives on the same tensors: attention_fwd over the
// prefill chunks plus decode over each q_len's decodes (separate), or one paged varlen
// attention_fwd over the whole step (varlen). CPU check: the forward reference over the step
// with each request's KV copied out densely (varlen, no pages, no plan). GPU check: the CPU
// reference on the last rows of the first prefill chunks and on a few decodes, and every output
// element finite (so no row went unwritten).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "api/launch_variants.hpp"
#include "common/element_access.hpp"
#include "device.hpp"
#include "family_util.hpp"
#include "hopattn/api.hpp"
#include "hopattn/batch.hpp"
#include "reference/reference.hpp"
#include "runner.hpp"

namespace hopattn::cli {
namespace {

constexpr int kCheckPrefills = 2;   // prefill chunks the GPU check recomputes...
constexpr int64_t kCheckRows = 64;  // ...on their last rows (bottom-right aligned: unchanged)
constexpr int kCheckDecodes = 4;    // decodes the GPU check recomputes from each end
constexpr int kPlanCalls = 21;      // plan() calls whose median host time is reported

// A run of requests [begin, end): one decode call of q_len `q_len`.
struct DecodeGroup {
  int begin = 0, end = 0, q_len = 1;
};

// Whether any 16-bit or fp32 element of `t` (contiguous host) is NaN or infinite.
bool all_finite(const Tensor& t) {
  const int64_t n = t.numel();
  if (t.dtype() == DType::kFP32) {
    const auto* p = static_cast<const float*>(t.host_data());
    return std::all_of(p, p + n, [](float v) { return v - v == 0.f; });
  }
  const uint16_t exp_mask = t.dtype() == DType::kBF16 ? 0x7f80 : 0x7c00;
  const auto* p = static_cast<const uint16_t*>(t.host_data());
  return std::all_of(p, p + n, [&](uint16_t v) { return (v & exp_mask) != exp_mask; });
}

class BatchWorkload final : public Workload {
 public:
  BatchWorkload(const Shape& s, uint64_t seed) : s_(s) {
    const Step& st = s.step;
    const int B = static_cast<int>(st.requests.size());
    const int64_t ps = s.page_size, D = s.head_dim, Dv = s.dv();
    cu_.assign(1, 0);
    int64_t pool = 0, max_pages = 1;
    for (const StepRequest& r : st.requests) {
      cu_.push_back(cu_.back() + r.q_len);
      kv_.push_back(r.kv_len());
      pool += ceil_div(r.kv_len(), ps);
      max_pages = std::max(max_pages, ceil_div(r.kv_len(), ps));
    }
    // Every page of the pool used once (pool_page_order); a row's unused entries name page 0.
    const std::vector<int32_t> pages = pool_page_order(pool, s.pages_in_order, seed + 3);
    std::vector<int32_t> table(size_t(B) * max_pages, 0);
    for (int b = 0, next = 0; b < B; ++b) {
      for (int64_t p = 0; p < ceil_div(kv_[b], ps); ++p) table[b * max_pages + p] = pages[next++];
    }
    const int64_t T = cu_.back();
    q_ = Tensor(s.dtype, {T, s.q_heads, D});
    out_ = Tensor(s.dtype, {T, s.q_heads, Dv});
    lse_ = Tensor(DType::kFP32, {T, s.q_heads});
    // One spare page in front of each pool: the views below start one page into their
    // allocations, as a pool carved from a larger cache does (either placement takes TMA).
    k_ = Tensor(s.kv_dtype, {pool + 1, ps, s.kv_heads, D});
    v_ = Tensor(s.kv_dtype, {pool + 1, ps, s.kv_heads, Dv});
    pool_ = pool;
    cu_q_ = int32_tensor(cu_);
    kv_lens_ = int32_tensor(kv_);
    table_ = int32_tensor(table, {B, max_pages});
    fill_random(q_, -2.0, 2.0, seed);
    fill_random(k_, -2.0, 2.0, seed + 1);
    fill_random(v_, -1.0, 1.0, seed + 2);
    prefills_ = st.prefills();
    for (int b = prefills_; b < B; ++b) {
      if (groups_.empty() || groups_.back().q_len != st.requests[b].q_len) {
        groups_.push_back({b, b, st.requests[b].q_len});
      }
      groups_.back().end = b + 1;
    }
  }

  void prepare(bool device) override {
    device_ = device;
    if (device) {
      for (Tensor* t : {&q_, &k_, &v_, &out_, &lse_, &cu_q_, &kv_lens_, &table_}) t->to_device();
    }
    const Side side = device ? Side::kDevice : Side::kHost;
    if (s_.batch_impl == BatchImpl::kSeparate && device) {
      for (const DecodeGroup& g : groups_) {
        const size_t bytes = decode_workspace_size(decode_args(g, side), decode_options());
        decode_ws_.emplace_back();
        if (bytes == 0) continue;
        decode_ws_.back() = DeviceMemory(bytes);
        fill_device_bytes(decode_ws_.back().data(), 0, bytes);
      }
    }
    if (s_.batch_impl != BatchImpl::kBatch) return;
    BatchAttentionConfig c;
    c.num_qo_heads = s_.q_heads;
    c.num_kv_heads = s_.kv_heads;
    c.head_dim = s_.head_dim;
    c.page_size = s_.page_size;
    set_mask(c, s_);
    c.max_batch = std::max<int>(1, static_cast<int>(kv_.size()));
    c.max_tokens = std::max(1, cu_.back());
    c.num_ctas = s_.batch_ctas;
    if (device) c.device = {DeviceType::kCUDA, 0};
    attn_ = std::make_unique<BatchAttention>(c);
    internal::BatchAttentionVariants::spread_decodes(*attn_, s_.batch_spread);
    internal::BatchAttentionVariants::side_decodes(*attn_, s_.batch_side);
    internal::BatchAttentionVariants::side_lane_cost(*attn_, s_.batch_side_cost);
    internal::BatchAttentionVariants::l2_sections(*attn_, s_.batch_sections);
    internal::BatchAttentionVariants::partition_decodes(
        *attn_, s_.batch_partition, s_.batch_decode_rate_milli, s_.batch_partition_ctas);
    internal::BatchAttentionVariants::concurrent_decodes(
        *attn_, s_.batch_concurrent, s_.batch_concurrent_rate_milli, s_.batch_concurrent_ctas);
    internal::BatchAttentionVariants::paged_tma(*attn_, s_.fwd_launch.paged_tma);
    internal::BatchAttentionVariants::concurrent_decode_kernel(*attn_, s_.decode_kernel);
    internal::BatchAttentionVariants::concurrent_tail(*attn_, s_.batch_concurrent_tail_milli);
    if (device) internal::BatchAttentionVariants::concurrent_sm_order(*attn_, s_.decode_sm_order);
    if (device && s_.decode_sm_gpc) internal::BatchAttentionVariants::concurrent_sm_spread(*attn_);
    if (device) {
      // Zeroed once (the workspace contract); plan() uploads the plan into it.
      workspace_ = DeviceMemory(attn_->workspace_size());
      fill_device_bytes(workspace_.data(), 0, workspace_.bytes());
    }
    // The step is planned kPlanCalls times (the last plan is the one run() uses); the median
    // host time of one plan() goes in the details. On a GPU also the plain plan() (into the
    // object's own host buffer, no upload) first: the planner's own time beside the whole call.
    const auto median_us = [&](bool upload) {
      std::vector<double> us;
      for (int i = 0; i < kPlanCalls; ++i) {
        const auto start = std::chrono::steady_clock::now();
        if (upload) {
          attn_->plan(cu_.data(), kv_.data(), static_cast<int>(kv_.size()), workspace(), nullptr);
        } else {
          attn_->plan(cu_.data(), kv_.data(), static_cast<int>(kv_.size()));
        }
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count());
      }
      std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
      return us[us.size() / 2];
    };
    plan_host_us_ = median_us(false);
    plan_us_ = device ? median_us(true) : plan_host_us_;
  }

  void poison_outputs(bool device) override {
    out_.poison(device ? Side::kDevice : Side::kHost);
    lse_.poison(device ? Side::kDevice : Side::kHost);
  }

  void run(Impl impl) override {
    const Side side = impl == Impl::kCpu ? Side::kHost : Side::kDevice;
    switch (s_.batch_impl) {
      case BatchImpl::kBatch: {
        BatchArgs a;
        a.q = q_.view(side);
        a.k_cache = pool_view(k_, side);
        a.v_cache = pool_view(v_, side);
        a.cu_seqlens_q = cu_q_.view(side);
        a.kv_lens = kv_lens_.view(side);
        a.page_table = table_.view(side);
        a.out = out_.view(side);
        a.lse = lse_.view(side);
        a.workspace = side == Side::kDevice ? workspace() : Workspace{};
        return attn_->run(a);
      }
      case BatchImpl::kSeparate:
        if (prefills_ > 0) attention_fwd(fwd_args(prefills_, side), fwd_options());
        for (size_t i = 0; i < groups_.size(); ++i) {
          DecodeArgs a = decode_args(groups_[i], side);
          if (side == Side::kDevice) a.workspace = {decode_ws_[i].data(), decode_ws_[i].bytes()};
          decode(a, decode_options());
        }
        return;
      case BatchImpl::kVarlen:
        return attention_fwd(fwd_args(static_cast<int>(kv_.size()), side), fwd_options());
    }
  }

  Check check_cpu() override {
    const Shape& s = s_;
    // Each request's keys and values copied out of the pages into dense varlen [total_kv, ...].
    std::vector<int32_t> cu_k(1, 0);
    for (int32_t kv : kv_) cu_k.push_back(cu_k.back() + kv);
    const Tensor& k_pool = ref_k();
    const Tensor& v_pool = ref_v();
    Tensor k(s.dtype, {cu_k.back(), s.kv_heads, s.head_dim});
    Tensor v(s.dtype, {cu_k.back(), s.kv_heads, s.dv()});
    const size_t k_row = size_t(s.kv_heads) * s.head_dim * dtype_size(s.dtype);
    const size_t v_row = size_t(s.kv_heads) * s.dv() * dtype_size(s.dtype);
    for (size_t b = 0; b < kv_.size(); ++b) {
      for (int64_t t = 0; t < kv_[b]; ++t) {
        const int64_t src = page_of(table_, b, t, s.page_size) * s.page_size + t % s.page_size;
        const int64_t dst = cu_k[b] + t;
        std::memcpy(static_cast<char*>(k.host_data()) + dst * k_row,
                    static_cast<const char*>(k_pool.host_data()) + (src + s.page_size) * k_row,
                    k_row);
        std::memcpy(static_cast<char*>(v.host_data()) + dst * v_row,
                    static_cast<const char*>(v_pool.host_data()) + (src + s.page_size) * v_row,
                    v_row);
      }
    }
    Tensor cu_k_t = int32_tensor(cu_k);
    Tensor out(s.dtype, out_.shape()), lse(DType::kFP32, lse_.shape());
    FwdArgs a;
    a.q = q_.host();
    a.k = k.host();
    a.v = v.host();
    a.cu_seqlens_q = cu_q_.host();
    a.cu_seqlens_k = cu_k_t.host();
    a.max_seqlen_q = s.step.max_q_len();
    a.max_seqlen_k = s.step.max_kv_len();
    a.out = out.host();
    a.lse = lse.host();
    reference::attention_fwd(a, fwd_options());
    return judge_out_lse(out_.host(), out.host(), lse_.host(), lse.host());
  }

  Check check_gpu() override {
    out_.from_device();
    lse_.from_device();
    if (!all_finite(out_) || !all_finite(lse_)) {
      return {std::nan(""), false, "NaN/Inf in out or lse (a row left unwritten?)"};
    }
    ErrorStats e_out, e_lse;
    const int ratio = s_.q_heads / s_.kv_heads;
    for (int b = 0; b < std::min(prefills_, kCheckPrefills); ++b) {
      const int64_t R = std::min<int64_t>(cu_[b + 1] - cu_[b], kCheckRows);
      for (int64_t g : std::set<int64_t>{0, s_.kv_heads - 1}) {
        check_rows(b, cu_[b + 1] - R, R, g * ratio, ratio, e_out, e_lse);
      }
    }
    for (int b : checked_decodes()) {
      check_rows(b, cu_[b], cu_[b + 1] - cu_[b], 0, s_.q_heads, e_out, e_lse);
    }
    return judge(e_out, &e_lse);
  }

  std::string cpu_check_note() const override {
    return "batch cpu-ref: vs the forward reference over the step with each request's KV dense "
           "(varlen, no pages, no plan)";
  }
  std::string gpu_check_note() const override {
    std::string note = "batch GPU rows: vs the CPU reference on ";
    if (prefills_ > 0) {
      note += "the last " + std::to_string(kCheckRows) + " rows of the first " +
              std::to_string(std::min(prefills_, kCheckPrefills)) +
              " prefill chunks (first and last KV head groups)";
    }
    if (prefills_ > 0 && !checked_decodes().empty()) note += " and ";
    if (!checked_decodes().empty()) {
      note += std::to_string(checked_decodes().size()) + " decodes (all heads)";
    }
    return note + "; every out / lse element finite";
  }

  std::string detail() const override {
    if (!attn_) return "";
    const BatchPlanSummary& p = attn_->planned();
    char upload[64] = "";
    if (device_)
      std::snprintf(upload, sizeof upload, ", with the upload; %.1f us without", plan_host_us_);
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "plan() %.1f us on the host (median of %d%s, not timed in the row); %d work "
                  "items, %d merges, up to %d KV chunks a row, %zu-byte plan",
                  plan_us_, kPlanCalls, upload, p.num_items, p.num_merges, p.num_splits_max,
                  p.plan_bytes);
    std::string out = buf;
    if (p.concurrent_ctas > 0) {
      out += "; concurrent form: prefill on " + std::to_string(p.concurrent_ctas) +
             " CTAs of each group, decodes by the decode family beside it";
    }
    return out;
  }

 private:
  Workspace workspace() const { return {workspace_.data(), workspace_.bytes()}; }

  AttentionOptions fwd_options() const {
    AttentionOptions o;
    set_mask(o, s_);
    return o;
  }

  DecodeOptions decode_options() const {
    DecodeOptions o;
    set_mask(o, s_);
    return o;
  }

  // Requests [0, b1) (rows 0 .. cu_[b1] - 1) as one paged varlen fwd call.
  FwdArgs fwd_args(int b1, Side side) const {
    FwdArgs a;
    a.q = narrow(q_.view(side), 0, 0, cu_[b1]);
    a.k = pool_view(k_, side);
    a.v = pool_view(v_, side);
    a.out = narrow(out_.view(side), 0, 0, cu_[b1]);
    a.lse = narrow(lse_.view(side), 0, 0, cu_[b1]);
    a.cu_seqlens_q = narrow(cu_q_.view(side), 0, 0, b1 + 1);
    for (int b = 0; b < b1; ++b) {
      a.max_seqlen_q = std::max(a.max_seqlen_q, cu_[b + 1] - cu_[b]);
      a.max_seqlen_k = std::max(a.max_seqlen_k, kv_[b]);
    }
    a.pages.block_table = narrow(table_.view(side), 0, 0, b1);
    a.pages.kv_lens = narrow(kv_lens_.view(side), 0, 0, b1);
    return a;
  }

  // One q_len's decodes as dense [n, q_len, H, D] views of their rows.
  DecodeArgs decode_args(const DecodeGroup& g, Side side) const {
    const int64_t n = g.end - g.begin, L = g.q_len, r0 = cu_[g.begin];
    auto dense = [&](const TensorView& t) {
      const TensorView r = narrow(t, 0, r0, n * L);
      if (t.rank() == 2) {
        return restride(r, {n, L, t.size(1)}, {L * t.stride(0), t.stride(0), t.stride(1)});
      }
      return restride(r, {n, L, t.size(1), t.size(2)},
                      {L * t.stride(0), t.stride(0), t.stride(1), t.stride(2)});
    };
    DecodeArgs a;
    a.q = dense(q_.view(side));
    a.k_cache = pool_view(k_, side);
    a.v_cache = pool_view(v_, side);
    a.pages.block_table = narrow(table_.view(side), 0, g.begin, n);
    a.pages.kv_lens = narrow(kv_lens_.view(side), 0, g.begin, n);
    a.out = dense(out_.view(side));
    a.lse = dense(lse_.view(side));
    return a;
  }

  // The first and last kCheckDecodes decodes.
  std::vector<int> checked_decodes() const {
    std::set<int> picked;
    const int B = static_cast<int>(kv_.size());
    for (int i = 0; i < kCheckDecodes; ++i) {
      if (prefills_ + i < B) picked.insert(prefills_ + i);
      if (B - 1 - i >= prefills_) picked.insert(B - 1 - i);
    }
    return {picked.begin(), picked.end()};
  }

  // The CPU reference on rows [r0, r0 + R) of request b (its last R rows) and q heads
  // [h0, h0 + nh) (whole KV head groups), against the downloaded result.
  void check_rows(int b, int64_t r0, int64_t R, int64_t h0, int64_t nh, ErrorStats& e_out,
                  ErrorStats& e_lse) const {
    const int ratio = s_.q_heads / s_.kv_heads;
    const int64_t g0 = h0 / ratio, ng = std::max<int64_t>(1, nh / ratio);
    auto rows = [&](const TensorView& t) {
      return narrow(varlen_rows_as_dense(t, r0, R), 2, h0, nh);
    };
    auto lse_rows = [&](const TensorView& t) {
      const TensorView r = restride(narrow(t, 0, r0, R), {1, R, t.size(1)},
                                    {R * t.stride(0), t.stride(0), t.stride(1)});
      return narrow(r, 2, h0, nh);
    };
    Tensor out(s_.dtype, {1, R, nh, s_.dv()}), lse(DType::kFP32, {1, R, nh});
    FwdArgs a;
    a.q = rows(q_.host());
    a.k = narrow(pool_view(ref_k(), Side::kHost), 2, g0, ng);
    a.v = narrow(pool_view(ref_v(), Side::kHost), 2, g0, ng);
    a.pages.block_table = narrow(table_.host(), 0, b, 1);
    a.pages.kv_lens = narrow(kv_lens_.host(), 0, b, 1);
    a.out = out.host();
    a.lse = lse.host();
    reference::attention_fwd(a, fwd_options());
    e_out.merge(compare_views(rows(out_.host()), out.host()));
    e_lse.merge(compare_views(lse_rows(lse_.host()), lse.host()));
  }

  Shape s_;
  bool device_ = false;
  // Pages 1 .. pool_ of a pool tensor, as the page table numbers them 0 .. pool_ - 1.
  TensorView pool_view(const Tensor& t, Side side) const {
    return narrow(t.view(side), 0, 1, pool_);
  }

  // The caches as the references read them: 16-bit copies of an fp8 cache (every e4m3 value is
  // exact in q's dtype), made when a check or the CPU run first asks (a timing-only run never
  // does: a step's cache holds up to billions of codes).
  const Tensor& ref_k() const { return ref_cache(k_, k16_); }
  const Tensor& ref_v() const { return ref_cache(v_, v16_); }
  const Tensor& ref_cache(const Tensor& cache, Tensor& wide) const {
    if (s_.kv_dtype == s_.dtype) return cache;
    if (!wide.defined()) wide = widened(cache, s_.dtype);
    return wide;
  }
  // `t` (host, 8-bit) in the 16-bit `dtype`, through a table of the 256 codes' encodings (a
  // cache of a step holds up to billions of elements).
  static Tensor widened(const Tensor& t, DType dtype) {
    uint8_t code[256];
    uint16_t wide[256];
    for (int c = 0; c < 256; ++c) code[c] = static_cast<uint8_t>(c);
    const TensorView codes(code, t.dtype(), {256}), values(wide, dtype, {256});
    for (int c = 0; c < 256; ++c) store_element(values, c, load_element(codes, c));
    Tensor w(dtype, t.shape());
    const auto* from = static_cast<const uint8_t*>(t.host_data());
    auto* to = static_cast<uint16_t*>(w.host_data());
    for (int64_t i = 0; i < t.numel(); ++i) to[i] = wide[from[i]];
    return w;
  }

  std::vector<int32_t> cu_, kv_;
  int64_t pool_ = 0;
  int prefills_ = 0;
  std::vector<DecodeGroup> groups_;
  Tensor q_, k_, v_, out_, lse_, cu_q_, kv_lens_, table_;
  mutable Tensor k16_, v16_;  // ref_k(), ref_v()
  std::unique_ptr<BatchAttention> attn_;
  DeviceMemory workspace_;
  std::vector<DeviceMemory> decode_ws_;
  double plan_us_ = 0;       // plan() as run() needs it (on a GPU: with the upload)
  double plan_host_us_ = 0;  // the plain plan(): host planning only
};

}  // namespace

std::unique_ptr<Workload> make_batch_workload(const Shape& s, uint64_t seed) {
  return std::make_unique<BatchWorkload>(s, seed);
}

}  // namespace hopattn::cli
