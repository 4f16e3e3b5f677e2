// Validation of mla: DeepSeek latent attention, varlen queries against a paged latent cache whose
// rows are both the keys (ckv . q_nope + kpe . q_pe) and the values (ckv).
#include <cmath>

#include "api/validate.hpp"
#include "api/validate_common.hpp"
#include "kernels/mla/configs.hpp"
#include "plan/mla_plan.hpp"
#include "plan/mla_tiles.hpp"

namespace hopattn::validate {

void mla(const MlaArgs& a, const MlaOptions& opts, DeviceValues values) {
  const Checker c("mla", a.q_nope, "q_nope", values);
  c.scale(opts.scale);
  c.dtype(a.q_nope, "q_nope", c.attention_dtypes());
  c.rank(a.q_nope, "q_nope", 3, "[total_q, H, 512]");
  const int64_t total_q = a.q_nope.size(0), heads = a.q_nope.size(1);
  c.shape(a.q_nope, "q_nope", {total_q, heads, kMlaLatentDim}, "[total_q, H, 512]");
  c.require(heads >= 1, ErrorKind::kValue, "q_nope", "H >= 1 heads", heads);
  const DTypes q_dtype({a.q_nope.dtype()}, "q_nope's dtype");
  c.tensor(a.q_pe, "q_pe", q_dtype, {total_q, heads, kMlaRopeDim}, "[total_q, H, 64]");

  // The pages are [num_pages, page_size, D]: there is no head dimension to lay out.
  c.require(a.pages.layout == KVLayout::kNHD, ErrorKind::kValue, "pages.layout",
            "NHD (MLA pages are [num_pages, page_size, D])", "HND");
  c.defined(a.ckv, "ckv");
  c.same_device(a.ckv, "ckv");
  // The cache: q's dtype, or fp8 e4m3 (real = stored * kv_scale), widened to q's dtype.
  c.dtype(a.ckv, "ckv", DTypes({a.q_nope.dtype(), DType::kFP8E4M3}, "q_nope's dtype or fp8_e4m3"));
  const PagePool pool = c.page_pool(a.ckv, "ckv", KVLayout::kNHD, 3);
  c.shape(a.ckv, "ckv", {pool.num_pages, pool.page_size, kMlaLatentDim},
          "[num_pages, page_size, 512]");
  c.tensor(a.kpe, "kpe", DTypes({a.ckv.dtype()}, "ckv's dtype"),
           {pool.num_pages, pool.page_size, kMlaRopeDim}, "[num_pages, page_size, 64] like ckv");
  // The CUDA kernel's (q, cache) dtype pairs: the rows of kernels/mla/configs.hpp.
  if (c.on_cuda() && !kernels::mla::built_config(a.q_nope.dtype(), a.ckv.dtype())) {
    c.fail(ErrorKind::kNotImplemented, "ckv",
           "(q_nope, ckv) dtypes among " + kernels::mla::built_configs_string() + " on CUDA",
           detail::concat("(", dtype_name(a.q_nope.dtype()), ", ", dtype_name(a.ckv.dtype()), ")"));
  }
  c.require(opts.num_splits >= 0 && opts.num_splits <= plan::mla::kMaxSplits, ErrorKind::kValue,
            "num_splits", "0..128 (0 = chosen by the library)", opts.num_splits);
  const int schedule = static_cast<int>(opts.schedule);
  c.require(schedule >= 0 && schedule <= static_cast<int>(MlaSchedule::kNarrow), ErrorKind::kValue,
            "schedule", "kAuto, kSeesaw, kOneConsumer or kNarrow (0..3)", schedule);
  // The seesaw schedule has no fp8 producer (src/kernels/mla/README.md).
  if (opts.schedule == MlaSchedule::kSeesaw && a.ckv.dtype() == DType::kFP8E4M3) {
    c.fail(ErrorKind::kNotImplemented, "schedule",
           "kAuto, kOneConsumer or kNarrow for an fp8_e4m3 cache (the seesaw schedule takes 16-bit "
           "caches)",
           "kSeesaw");
  }
  // The narrow schedule holds one request's rows on the MMA's N side (plan/mla_plan.hpp).
  const bool fp8_cache = a.ckv.dtype() == DType::kFP8E4M3;
  if (opts.schedule == MlaSchedule::kNarrow &&
      !plan::mla::narrow_fits(a.max_seqlen_q, heads, fp8_cache)) {
    c.fail(ErrorKind::kNotImplemented, "schedule",
           detail::concat("kNarrow for requests of at most ", plan::mla::narrow_rows(fp8_cache),
                          " rows (max_seqlen_q * heads)"),
           detail::concat("max_seqlen_q ", a.max_seqlen_q, " x ", heads, " heads"));
  }
  if (!(std::isfinite(a.kv_scale) && a.kv_scale > 0.f)) {
    c.fail(ErrorKind::kValue, "kv_scale", "a finite value > 0", a.kv_scale);
  }

  c.tensor(a.out, "out", q_dtype, Shape::of(a.q_nope), "q_nope's shape");
  c.tensor(a.lse, "lse", DTypes({DType::kFP32}), {total_q, heads}, "[total_q, H]");
  c.tma_layout(a.q_nope, "q_nope");
  c.tma_layout(a.q_pe, "q_pe");
  c.tma_layout(a.ckv, "ckv");
  c.tma_layout(a.kpe, "kpe");
  c.tma_layout(a.out, "out");

  c.max_seqlen(a.max_seqlen_q, "max_seqlen_q");
  const int64_t batch = c.offsets(a.cu_seqlens_q, "cu_seqlens_q",
                                  {total_q, "q_nope", -1, {}, a.max_seqlen_q, "max_seqlen_q"});
  c.page_table(a.pages, batch, "cu_seqlens_q", pool);
  c.outputs_disjoint({{&a.out, "out"}, {&a.lse, "lse"}}, {{&a.q_nope, "q_nope"},
                                                          {&a.q_pe, "q_pe"},
                                                          {&a.ckv, "ckv"},
                                                          {&a.kpe, "kpe"},
                                                          {&a.cu_seqlens_q, "cu_seqlens_q"},
                                                          {&a.pages.block_table, "page_table"},
                                                          {&a.pages.indptr, "page_indptr"},
                                                          {&a.pages.indices, "page_indices"},
                                                          {&a.pages.kv_lens, "kv_lens"}});
}

}  // namespace hopattn::validate
