// Validation of decode: q [B, q_len, Hq, D] against a paged KV cache (16-bit or 8-bit), with
// scales, sinks, tree masks, beam search and split-sequence options.
#include <algorithm>

#include "api/validate.hpp"
#include "api/validate_common.hpp"
#include "hopattn/api.hpp"
#include "kernels/decode/configs.hpp"
#include "plan/decode_plan.hpp"
#include "reference/kv_locator.hpp"

namespace hopattn::validate {
namespace {

using detail::concat;
using reference::index_at;

inline constexpr int kMaxSplits = 256;  // split-sequence partials per (request, head)

void check_options(const Checker& c, const DecodeOptions& o, int64_t batch) {
  c.window(o.window);
  c.softcap(o.softcap);
  c.scale(o.scale);
  if (o.beam_width < 1 || batch % o.beam_width != 0) {
    c.fail(ErrorKind::kValue, "beam_width", concat(">= 1 and dividing B = ", batch), o.beam_width);
  }
  c.require(o.num_splits >= 0 && o.num_splits <= kMaxSplits, ErrorKind::kValue, "num_splits",
            "0..256 (0 = chosen by the library)", o.num_splits);
  const int kernel = static_cast<int>(o.kernel);
  c.require(kernel >= 0 && kernel <= static_cast<int>(DecodeKernel::kNarrow), ErrorKind::kValue,
            "kernel", "kAuto, kTiles, kSmall or kNarrow (0..3)", kernel);
}

// The decode kernels are built for one head dim shared by K and V (the rows of
// kernels/decode/configs.hpp); the CPU takes any in range.
void check_head_dims(const Checker& c, int64_t d, int64_t dv) {
  c.head_dims_in_range(d, dv);
  if (c.on_cuda() && !(d == dv && kernels::decode::built_head_dim(d))) {
    c.fail(ErrorKind::kNotImplemented, "head_dim",
           "one of " + kernels::decode::built_head_dims_string() + " on CUDA",
           head_dims_string(d, dv));
  }
}

// kv_lens count the q_len new tokens, so a live request holds at least q_len of them; 0 marks an
// idle batch slot (padding), which yields out = 0 and lse = -inf.
void check_kv_lens_cover_queries(const Checker& c, const TensorView& kv_lens, int64_t q_len) {
  for (int64_t b = 0; b < kv_lens.size(0); ++b) {
    const int64_t kv_len = index_at(kv_lens, b);
    if (kv_len != 0 && kv_len < q_len) {
      c.fail(ErrorKind::kValue, concat("kv_lens[", b, "]"),
             concat("0 (an idle slot) or >= q_len = ", q_len, " (kv_lens count the new tokens)"),
             kv_len);
    }
  }
}

// Beam search: shared_kv_lens [B / beam_width]; on host each shared prefix fits every beam.
void check_shared_prefix(const Checker& c, const DecodeArgs& a, int beam_width) {
  const TensorView& shared = a.shared_kv_lens;
  if (!shared.defined()) return;
  const int64_t requests = a.q.size(0) / beam_width;
  c.index_tensor(shared, "shared_kv_lens", 1, "[B / beam_width]");
  if (shared.size(0) != requests) {
    c.fail(
        ErrorKind::kValue, "shared_kv_lens",
        concat("shape [", requests, "] ([B / beam_width] = ", a.q.size(0), " / ", beam_width, ")"),
        "shape " + shared.shape_string());
  }
  if (!c.reads_index_values()) return;
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t len = index_at(shared, r);
    int64_t shortest = index_at(a.pages.kv_lens, r * beam_width);
    for (int64_t w = 1; w < beam_width; ++w) {
      shortest = std::min(shortest, index_at(a.pages.kv_lens, r * beam_width + w));
    }
    if (len < 0 || len > shortest) {
      c.fail(ErrorKind::kValue, concat("shared_kv_lens[", r, "]"),
             concat("0..", shortest, " (the shortest kv_len among request ", r, "'s beams)"), len);
    }
  }
}

}  // namespace

void decode(const DecodeArgs& a, const DecodeOptions& opts, DeviceValues values) {
  const Checker c("decode", a.q, "q", values);
  c.dtype(a.q, "q", c.attention_dtypes());
  c.rank(a.q, "q", 4, "[B, q_len, Hq, D]");
  const int64_t batch = a.q.size(0), q_len = a.q.size(1), hq = a.q.size(2), d = a.q.size(3);
  c.require(q_len >= 1 && q_len <= plan::kDecodeMaxQLen, ErrorKind::kValue, "q", "q_len in 1..16",
            q_len);
  check_options(c, opts, batch);

  // The cache holds q's own 16-bit type, or 8-bit values dequantized by k_scale / v_scale.
  const DTypes cache_dtypes({a.q.dtype(), DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8},
                            "q's dtype or 8-bit");
  c.defined(a.k_cache, "k_cache");
  c.same_device(a.k_cache, "k_cache");
  c.dtype(a.k_cache, "k_cache", cache_dtypes);
  const PagePool pool = c.page_pool(a.k_cache, "k_cache", a.pages.layout);
  c.shape(a.k_cache, "k_cache", Shape::of(a.k_cache).with(-1, d), "pages with q's D");
  c.defined(a.v_cache, "v_cache");
  c.same_device(a.v_cache, "v_cache");
  c.dtype(a.v_cache, "v_cache", DTypes({a.k_cache.dtype()}, "k_cache's dtype"));
  c.page_pool(a.v_cache, "v_cache", a.pages.layout);
  const int64_t dv = a.v_cache.size(-1);
  c.shape(a.v_cache, "v_cache", Shape::of(a.k_cache).with(-1, dv),
          "k_cache's shape with v_cache's own D");
  c.heads(hq, pool.num_heads, "k_cache");
  check_head_dims(c, d, dv);

  const DTypes fp32({DType::kFP32});
  c.tensor(a.out, "out", DTypes({a.q.dtype()}, "q's dtype"), Shape::of(a.q).with(-1, dv),
           "q's shape with v_cache's D last");
  c.tensor(a.lse, "lse", fp32, {batch, q_len, hq}, "[B, q_len, Hq]");
  c.sinks(a.sinks, hq);
  c.optional_tensor(a.tree_mask, "tree_mask", DTypes({DType::kBool}), {batch, q_len, q_len},
                    "[B, q_len, q_len]");
  c.kv_scale(a.k_scale, "k_scale", pool.num_heads);
  c.kv_scale(a.v_scale, "v_scale", pool.num_heads);
  c.tma_layout(a.q, "q");
  c.tma_layout(a.k_cache, "k_cache");
  c.tma_layout(a.v_cache, "v_cache");
  c.tma_layout(a.out, "out");

  c.page_table(a.pages, batch, "q", pool);
  if (c.reads_index_values()) check_kv_lens_cover_queries(c, a.pages.kv_lens, q_len);
  check_shared_prefix(c, a, opts.beam_width);
  // The small-grid kernel holds one request's rows in one m16 tile (plan/decode_plan.hpp).
  if (opts.kernel == DecodeKernel::kSmall && !plan::small_kernel_takes(a, opts)) {
    c.fail(ErrorKind::kNotImplemented, "kernel",
           concat("kSmall for ", plan::forced_kernel_scope(DecodeKernel::kSmall)),
           concat("q ", a.q.shape_string(), ", Hkv ", pool.num_heads,
                  a.tree_mask.defined() ? ", a tree mask" : "",
                  a.shared_kv_lens.defined() && opts.beam_width > 1 ? ", beams" : ""));
  }
  // The narrow kernel: at most 8 rows a request, a 16-bit cache, whole 16-key blocks a page.
  if (opts.kernel == DecodeKernel::kNarrow && !plan::narrow_kernel_takes(a, opts)) {
    c.fail(ErrorKind::kNotImplemented, "kernel",
           concat("kNarrow for ", plan::forced_kernel_scope(DecodeKernel::kNarrow)),
           concat("q ", a.q.shape_string(), " ", dtype_name(a.q.dtype()), ", Hkv ", pool.num_heads,
                  ", k_cache ", a.k_cache.shape_string(), " ", dtype_name(a.k_cache.dtype()),
                  ", num_splits ", opts.num_splits, a.tree_mask.defined() ? ", a tree mask" : "",
                  a.shared_kv_lens.defined() && opts.beam_width > 1 ? ", beams" : ""));
  }
  c.workspace(a.workspace, decode_workspace_size(a, opts));
  c.outputs_disjoint({{&a.out, "out"}, {&a.lse, "lse"}}, {{&a.q, "q"},
                                                          {&a.k_cache, "k_cache"},
                                                          {&a.v_cache, "v_cache"},
                                                          {&a.pages.block_table, "page_table"},
                                                          {&a.pages.indptr, "page_indptr"},
                                                          {&a.pages.indices, "page_indices"},
                                                          {&a.pages.kv_lens, "kv_lens"},
                                                          {&a.k_scale.per_head, "k_scale"},
                                                          {&a.v_scale.per_head, "v_scale"},
                                                          {&a.sinks, "sinks"},
                                                          {&a.tree_mask, "tree_mask"},
                                                          {&a.shared_kv_lens, "shared_kv_lens"}});
}

}  // namespace hopattn::validate
