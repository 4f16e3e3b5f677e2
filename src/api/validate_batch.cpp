// Validation of the batch family (BatchAttention): its configuration, the host lengths plan()
// reads, and run()'s tensors against the configuration and the step plan() saw. The planner
// checks the limits and the lengths' values itself (src/plan/batch_plan.cpp); this file checks
// what the planner cannot see: devices, dtypes, shapes, page tables, scales, sinks, workspace.
#include <cstdint>

#include "api/validate.hpp"
#include "api/validate_common.hpp"
#include "reference/kv_locator.hpp"

namespace hopattn::validate {
namespace {

using detail::concat;
using reference::index_at;

// The lengths plan() reads are on the host: reading device memory would synchronize.
void host_lengths(const Checker& c, const TensorView& t, std::string_view arg,
                  std::string_view dims) {
  c.defined(t, arg);
  if (t.is_cuda()) {
    c.fail(ErrorKind::kType, arg,
           "a host (CPU) tensor (plan() reads the lengths on the host, never from the device)",
           t.device());
  }
  c.index_tensor(t, arg, 1, dims);
}

// The caches: one pool shape for both, from the configuration; 8-bit values dequantized by the
// scales. CUDA takes fp8 e4m3 as its one 8-bit format (the batch family's kernel contract).
PagePool check_caches(const Checker& c, const BatchArgs& a, const BatchAttentionConfig& cfg,
                      int64_t dv) {
  const DTypes cache_dtypes =
      c.on_cuda() ? DTypes({a.q.dtype(), DType::kFP8E4M3}, "q's dtype or fp8_e4m3 on CUDA")
                  : DTypes({a.q.dtype(), DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8},
                           "q's dtype or 8-bit");
  c.defined(a.k_cache, "k_cache");
  c.same_device(a.k_cache, "k_cache");
  c.dtype(a.k_cache, "k_cache", cache_dtypes);
  const PagePool pool = c.page_pool(a.k_cache, "k_cache", cfg.kv_layout);
  const bool nhd = cfg.kv_layout == KVLayout::kNHD;
  const Shape k_shape = nhd ? Shape{pool.num_pages, cfg.page_size, cfg.num_kv_heads, cfg.head_dim}
                            : Shape{pool.num_pages, cfg.num_kv_heads, cfg.page_size, cfg.head_dim};
  c.shape(a.k_cache, "k_cache", k_shape,
          nhd ? "[num_pages, page_size, num_kv_heads, head_dim] (NHD) of the BatchAttention"
              : "[num_pages, num_kv_heads, page_size, head_dim] (HND) of the BatchAttention");
  c.defined(a.v_cache, "v_cache");
  c.same_device(a.v_cache, "v_cache");
  c.dtype(a.v_cache, "v_cache", DTypes({a.k_cache.dtype()}, "k_cache's dtype"));
  c.shape(a.v_cache, "v_cache", k_shape.with(-1, dv), "k_cache's shape with head_dim_v last");
  c.kv_scale(a.k_scale, "k_scale", cfg.num_kv_heads);
  c.kv_scale(a.v_scale, "v_scale", cfg.num_kv_heads);
  return pool;
}

// cu_seqlens_q, kv_lens and the page table: the plan's B, and on host the plan's very values
// (the plan's work items address exactly those rows and keys).
void check_step(const Checker& c, const BatchArgs& a, const BatchAttentionConfig& cfg,
                const BatchPlanned& p, const PagePool& pool) {
  const int64_t rows = a.q.size(0);
  c.offsets(a.cu_seqlens_q, "cu_seqlens_q", {rows, "q", p.batch, "plan()", 0, {}});
  c.index_tensor(a.page_table, "page_table", 2, "[B, max_pages]");
  // The plan's lengths are on the host whatever the tensors' device: the table's width is
  // checked against them even where its values cannot be read.
  const int64_t pages_needed = (int64_t{p.max_kv_len} + cfg.page_size - 1) / cfg.page_size;
  if (a.page_table.size(1) < pages_needed) {
    c.fail(ErrorKind::kValue, "page_table",
           concat("at least ", pages_needed, " pages a row (the longest kv_len plan() saw is ",
                  p.max_kv_len, ", pages hold ", cfg.page_size, " tokens)"),
           "shape " + a.page_table.shape_string());
  }
  PageTable pages;
  pages.block_table = a.page_table;
  pages.kv_lens = a.kv_lens;
  pages.layout = cfg.kv_layout;
  c.page_table(pages, p.batch, "plan()", pool);
  if (!c.reads_index_values()) return;
  for (int64_t i = 0; i <= p.batch; ++i) {
    const int64_t v = index_at(a.cu_seqlens_q, i);
    if (v != p.cu_seqlens_q[i]) {
      c.fail(ErrorKind::kValue, concat("cu_seqlens_q[", i, "]"),
             concat(p.cu_seqlens_q[i], " (what plan() was given; plan() again for a new step)"), v);
    }
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t v = index_at(a.kv_lens, b);
    if (v != p.kv_lens[b]) {
      c.fail(ErrorKind::kValue, concat("kv_lens[", b, "]"),
             concat(p.kv_lens[b], " (what plan() was given; plan() again for a new step)"), v);
    }
  }
}

}  // namespace

void batch_config(const BatchAttentionConfig& cfg) {
  // A tensor of no elements stands in for the call's anchor: it names the device only.
  const TensorView anchor(nullptr, DType::kFP32, {0}, cfg.device);
  const Checker c("BatchAttention", anchor, "device");
  c.require(cfg.device.index >= 0, ErrorKind::kValue, "device", "a device index >= 0",
            cfg.device.index);
  c.require(cfg.kv_layout == KVLayout::kNHD || cfg.kv_layout == KVLayout::kHND, ErrorKind::kValue,
            "kv_layout", "NHD or HND", static_cast<int>(cfg.kv_layout));
  c.window(cfg.window);
  c.softcap(cfg.softcap);
  c.scale(cfg.scale);
  c.require(cfg.num_ctas >= 0, ErrorKind::kValue, "num_ctas",
            ">= 0 (0 = the largest Hopper part's grid)", cfg.num_ctas);
}

void batch_plan(const TensorView& cu_seqlens_q, const TensorView& kv_lens) {
  const Checker c("BatchAttention.plan", cu_seqlens_q, "cu_seqlens_q");
  host_lengths(c, cu_seqlens_q, "cu_seqlens_q", "[B + 1]");
  c.require(cu_seqlens_q.size(0) >= 1, ErrorKind::kValue, "cu_seqlens_q",
            "shape [B + 1] with B >= 0", "shape [0]");
  host_lengths(c, kv_lens, "kv_lens", "[B]");
  const int64_t batch = cu_seqlens_q.size(0) - 1;
  if (kv_lens.size(0) != batch) {
    c.fail(ErrorKind::kValue, "kv_lens", concat("shape [", batch, "] ([B] from cu_seqlens_q)"),
           "shape " + kv_lens.shape_string());
  }
}

void batch_run(const BatchArgs& a, const BatchAttentionConfig& cfg, const BatchPlanned& p,
               size_t workspace_bytes, DeviceValues values) {
  const Checker c("BatchAttention.run", a.q, "q", values);
  if (p.batch < 0) {
    c.fail(ErrorKind::kValue, "plan", "a plan of the step (call plan() before run())", "none");
  }
  if (a.q.device() != cfg.device) {
    c.fail(ErrorKind::kType, "q",
           concat("a tensor on ", cfg.device, " (the device the BatchAttention was made for)"),
           a.q.device());
  }
  c.dtype(a.q, "q", c.attention_dtypes());
  c.rank(a.q, "q", 3, "[total_q, Hq, D]");
  const int64_t rows = a.q.size(0), hq = cfg.num_qo_heads;
  const int64_t dv = cfg.head_dim_v != 0 ? cfg.head_dim_v : cfg.head_dim;
  c.shape(a.q, "q", {rows, hq, cfg.head_dim},
          "[total_q, num_qo_heads, head_dim] of the BatchAttention");
  c.token_count(rows, "q", "queries");
  const int64_t total_q = p.cu_seqlens_q[p.batch];
  if (rows < total_q) {
    c.fail(ErrorKind::kValue, "q",
           concat("at least ", total_q, " rows (the step's q tokens, cu_seqlens_q[", p.batch,
                  "] as plan() saw it)"),
           concat(rows, " rows"));
  }
  const PagePool pool = check_caches(c, a, cfg, dv);

  c.tensor(a.out, "out", DTypes({a.q.dtype()}, "q's dtype"), {rows, hq, dv},
           "[total_q, num_qo_heads, head_dim_v]");
  c.tensor(a.lse, "lse", DTypes({DType::kFP32}), {rows, hq}, "[total_q, num_qo_heads]");
  c.sinks(a.sinks, hq);
  c.tma_layout(a.q, "q");
  c.tma_layout(a.k_cache, "k_cache");
  c.tma_layout(a.v_cache, "v_cache");
  c.tma_layout(a.out, "out");
  check_step(c, a, cfg, p, pool);
  if (c.on_cuda()) c.workspace(a.workspace, workspace_bytes);
  c.outputs_disjoint({{&a.out, "out"}, {&a.lse, "lse"}}, {{&a.q, "q"},
                                                          {&a.k_cache, "k_cache"},
                                                          {&a.v_cache, "v_cache"},
                                                          {&a.cu_seqlens_q, "cu_seqlens_q"},
                                                          {&a.kv_lens, "kv_lens"},
                                                          {&a.page_table, "page_table"},
                                                          {&a.sinks, "sinks"},
                                                          {&a.k_scale.per_head, "k_scale"},
                                                          {&a.v_scale.per_head, "v_scale"}});
}

}  // namespace hopattn::validate
