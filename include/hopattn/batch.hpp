// The batch family: one serving step (a few prefill chunks and many decodes over one paged KV
// cache) as one call. A BatchAttention is made once for the engine's limits; plan() runs once per
// step on the host from host copies of the step's lengths; run() then serves every layer of the
// step with that plan. CPU tensors run the CPU reference item by item through the plan; CUDA
// tensors run one persistent kernel launch (the fwd family's wgmma mainloop walking the plan's
// per-CTA work lists) plus, when the plan split some rows' keys, one merge launch.
//
// CUDA plans live in device memory: plan(..., workspace, stream) copies the plan from pinned
// host staging into the workspace's plan region by one asynchronous copy on `stream`, and run()
// reads it there. A CUDA graph that captured run() therefore replays whatever plan was uploaded
// last. A plan() without a workspace leaves the upload to the next run() (which refuses to
// upload while its stream is being captured).
//
// Shapes ("NHD" or "HND" pages, as decode): q [total_q, Hq, D]; k_cache [num_pages, page_size,
// Hkv, D] (NHD) or [num_pages, Hkv, page_size, D] (HND), v_cache the same with Dv; cu_seqlens_q
// int32 [B + 1]; kv_lens int32 [B] (cached tokens including the request's q tokens, so each
// kv_len >= its q_len); page_table int32 [B, max_pages]; out [total_q, Hq, Dv]; lse fp32
// [total_q, Hq]. Request b's q tokens are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1; a
// request with no q tokens (a finished or idle slot) costs nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "hopattn/options.hpp"

namespace hopattn {

namespace internal {
struct BatchAttentionVariants;  // the benchmark's launch variants (src/api/launch_variants.hpp)
}  // namespace internal

struct BatchAttentionConfig {
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 128;  // Dqk: 64, 128 or 256
  int page_size = 16;  // 1..256
  int head_dim_v = 0;  // Dv: 64, 128 or 256; 0 = head_dim
  KVLayout kv_layout = KVLayout::kNHD;
  bool causal = true;  // bottom-right aligned
  Window window{};
  float softcap = 0.f;
  std::optional<float> scale;  // default 1 / sqrt(head_dim)
  int max_batch = 256;         // every step has at most this many requests
  int max_tokens = 16384;      // and at most this many q tokens in all
  Device device{};             // where run()'s tensors live
  // The persistent grid plans are cut for (SMs x CTAs per SM); 0 = the largest Hopper part's.
  // It changes how a step is cut into work items, never the result.
  int num_ctas = 0;
};

struct BatchArgs {
  TensorView q;                 // [total_q, Hq, D], bf16/fp16 (fp32 on CPU)
  TensorView k_cache, v_cache;  // pages in config.kv_layout: q's dtype or 8-bit (fp8, int8)
  TensorView cu_seqlens_q;      // int32 [B + 1], the values plan() saw
  TensorView kv_lens;           // int32 [B], the values plan() saw
  TensorView page_table;        // int32 [B, max_pages]
  TensorView sinks;             // optional fp32 [Hq]
  KVScale k_scale, v_scale;     // 8-bit caches: real = stored * scale
  TensorView out;               // output [total_q, Hq, Dv], q's dtype
  TensorView lse;               // output fp32 [total_q, Hq]
  Workspace workspace;          // CUDA: workspace_size() bytes, zeroed once; holds the plan
};

// What the last successful plan() made.
struct BatchPlanSummary {
  int batch = -1;  // -1: no plan yet
  int total_q = 0;
  int num_items = 0;       // (row tile, KV head, KV chunk) work items over all CTAs
  int num_merges = 0;      // split (row tile, KV head) pairs merged after their chunks
  int num_splits_max = 1;  // most KV chunks of one pair
  size_t plan_bytes = 0;   // bytes of the plan buffer written
  // How the step's decodes overlap its prefill tiles (chosen per step; plan::BatchOverlap):
  bool decodes_spread = false;  // each CTA's decodes placed between its prefill items
  int num_side_items = 0;       // decode items run by two producer warps beside prefill tiles
  // > 0: the prefill items run on the first partition_ctas CTAs of each group of
  // num_ctas / gcd(num_kv_heads, num_ctas) and the decode items on the others, side by side.
  int partition_ctas = 0;
  // > 0: the step also has a concurrent form, its prefill items alone on the first
  // concurrent_ctas CTAs of each group and its decodes by the decode family on a second stream at
  // the same time, which run() takes outside CUDA graph captures (inside one, the plan above).
  int concurrent_ctas = 0;
  // The concurrent form's tail (a tuning variant, off by default): the other CTAs of each group
  // also run prefill items, after the decodes, in a second launch on the decode stream.
  bool concurrent_tail = false;
};

class BatchAttention {
 public:
  // Checks the configuration (hopattn::Error saying what was expected and what was given) and
  // allocates everything plan() and CPU runs use, sized from the limits: no later call allocates.
  explicit BatchAttention(const BatchAttentionConfig& config);
  ~BatchAttention();
  BatchAttention(BatchAttention&&) noexcept;
  BatchAttention& operator=(BatchAttention&&) noexcept;
  BatchAttention(const BatchAttention&) = delete;
  BatchAttention& operator=(const BatchAttention&) = delete;

  // Pure host functions of the configuration (no device, no tensor), also in CPU-only builds:
  // bytes of the host plan buffer (16-byte aligned) and of run()'s workspace (0 on CPU).
  static size_t plan_buffer_size(const BatchAttentionConfig& config);
  static size_t workspace_size(const BatchAttentionConfig& config);
  size_t plan_buffer_size() const;
  size_t workspace_size() const;

  // Plans a step from host arrays: cu_seqlens_q int32 [B + 1] (0 first, non-decreasing, last <=
  // max_tokens) and kv_lens int32 [B] (each >= its request's q tokens), B <= max_batch. No device
  // sync, no allocation. The plan goes to the object's own host buffer, or to `plan_buffer`
  // (host memory of plan_buffer_size() bytes, 16-byte aligned, kept alive and unchanged until the
  // next plan()). A rejected plan() throws before writing anything and keeps the previous plan.
  void plan(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch);
  void plan(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch, void* plan_buffer,
            size_t plan_buffer_bytes);
  // The same from host (CPU) int32 tensors of any strides.
  void plan(const TensorView& cu_seqlens_q, const TensorView& kv_lens);
  void plan(const TensorView& cu_seqlens_q, const TensorView& kv_lens, void* plan_buffer,
            size_t plan_buffer_bytes);
  // CUDA configurations: plan as above into the object's pinned staging buffer, then copy the
  // plan into `workspace` (workspace_size() bytes on the config's device, the one run() will get)
  // on `stream`. No device sync: the staging is double-buffered, and a plan() waits only for the
  // upload of the plan before last to have left host memory (a cudaEventSynchronize on that
  // copy, normally long done). Throws ErrorKind::kValue for a CPU configuration or a
  // workspace that is too small.
  void plan(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch, Workspace workspace,
            Stream stream);
  void plan(const TensorView& cu_seqlens_q, const TensorView& kv_lens, Workspace workspace,
            Stream stream);

  // Attention of the planned step into args.out / args.lse, for one layer. Validates every
  // argument first (nothing is written on a rejected call); on host, cu_seqlens_q and kv_lens must
  // hold what plan() saw. Calls on one object must not overlap in time (they share its scratch).
  // CUDA: args.workspace is where plan(..., workspace, stream) uploaded the plan, or, after a
  // plan() without one, any workspace, to which run() then uploads the plan first.
  void run(const BatchArgs& args, Stream stream = nullptr) const;

  const BatchAttentionConfig& config() const;
  const BatchPlanSummary& planned() const;

 private:
  int stage_lengths(const TensorView& cu_seqlens_q, const TensorView& kv_lens);
  void plan_lengths(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch);
  void check_upload_target(const Workspace& workspace) const;

  struct Impl;  // src/api/batch_state.hpp
  std::unique_ptr<Impl> impl_;
  friend struct internal::BatchAttentionVariants;
};

}  // namespace hopattn
