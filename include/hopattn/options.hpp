// Options and argument bundles of every attention family. Shapes follow DESIGN.md ("NHD"):
// q [total_q, Hq, Dqk] (or dense [B, Sq, Hq, Dqk]), k [.., Hkv, Dqk], v [.., Hkv, Dv].
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "hopattn/tensor_view.hpp"

namespace hopattn {

// Sliding window in keys left/right of the (bottom-right aligned) diagonal; -1 = unbounded.
struct Window {
  int left = -1;
  int right = -1;
};

enum class KVLayout : uint8_t {
  kNHD,  // pages [num_pages, page_size, Hkv, D]
  kHND,  // pages [num_pages, Hkv, page_size, D]
};

// Addressing of a paged KV cache. Either a block table or CSR, plus the lengths.
struct PageTable {
  TensorView block_table;  // int32 [B, max_pages]; or
  TensorView indptr;       // int32 [B + 1], CSR row pointers into `indices`
  TensorView indices;      // int32 [indptr[B]]
  TensorView kv_lens;      // int32 [B]: tokens in each request's cache
  KVLayout layout = KVLayout::kNHD;
  bool defined() const { return block_table.defined() || indptr.defined(); }
};

// Caller-owned scratch memory (device memory for CUDA calls); size from *_workspace_size().
// decode: zero the whole workspace ONCE after allocating it (e.g. cudaMemset) and keep it across
// calls; every call leaves it fit for the next one (its split semaphores back at zero), so calls
// need no per-call reset. Calls that may run concurrently (different streams) need workspaces of
// their own. An interrupted call (a fault, a killed kernel) can leave it dirty: zero it again.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// ---------------------------------------------------------------- fwd / bwd
struct AttentionOptions {
  bool causal = false;
  Window window{};
  float softcap = 0.f;         // > 0: s = softcap * tanh(s / softcap) on scaled logits
  std::optional<float> scale;  // default 1 / sqrt(Dqk)
  bool deterministic = false;  // bwd: bitwise reproducible dq/dk/dv
  // fwd on CUDA with GQA (Hq > Hkv): whether the q heads of one KV head share a work tile
  // (rows = (q position, head) pairs). Unset: the kernel decides (it packs when that saves a tenth
  // of the tiles: short q_len). Results are the same either way up to rounding order.
  std::optional<bool> pack_gqa;
};

struct FwdArgs {
  // Dense: q [B, Sq, Hq, Dqk], k [B, Sk, Hkv, Dqk], v [B, Sk, Hkv, Dv].
  // Varlen: q [total_q, Hq, Dqk], k/v [total_kv, Hkv, D], cu_seqlens_q/k int32 [B + 1].
  // Paged: q varlen (cu_seqlens_q); k/v are page pools addressed by `pages`.
  TensorView q, k, v;
  TensorView cu_seqlens_q, cu_seqlens_k;
  int max_seqlen_q = 0;  // varlen/paged on CUDA: required host-side bounds (no device sync)
  int max_seqlen_k = 0;
  PageTable pages;
  TensorView sinks;  // optional fp32 [Hq]
  TensorView out;    // output: q's shape with Dv last, q's dtype
  TensorView lse;    // output: fp32, q's shape without the last dim
};

struct BwdArgs {
  // The forward's inputs, with out and lse as produced by it (inputs here). The gradients are
  // computed from these out and lse (p = exp(s - lse), D = rowsum(dout * out)) on every device:
  // with the merged out and lse of a split forward, a call on one key block gives its share.
  FwdArgs fwd;
  TensorView dout;    // out's shape and dtype
  TensorView dq;      // output: q's shape and dtype
  TensorView dk, dv;  // output: k's / v's shape and dtype (GQA: summed over each q-head group)
  TensorView dsinks;  // optional output: fp32 [Hq]
  Workspace workspace;
};

// ---------------------------------------------------------------- decode
// Dequantization scale of an 8-bit (or 16-bit) KV cache: real = stored * scale.
struct KVScale {
  float value = 1.f;    // per tensor
  TensorView per_head;  // optional fp32 [Hkv]; overrides `value`
};

// The CUDA decode kernel: the library's choice (kAuto: the small-grid kernel wherever it takes
// the call, else the tile kernel), or forced (tests, benchmarks). kTiles: 64-key tiles that a CTA's
// four warps share (every call); kSmall: each warp streams its own 16-key blocks (beam width 1, no
// tree mask, q_len * Hq / Hkv <= 16, D = 64 or 128); kNarrow: kSmall's schedule with the keys as
// the MMAs' M and at most 8 rows as their N (beam width 1, no tree mask, q_len * Hq / Hkv <= 8,
// D = 64 or 128, a 16-bit cache of q's dtype in pages of a multiple of 16 keys, one split). All
// give the same result within the tolerances; the CPU reference ignores it, but kSmall or kNarrow
// on a call it does not take is rejected on every device (kNotImplemented).
enum class DecodeKernel { kAuto, kTiles, kSmall, kNarrow };

struct DecodeOptions {
  bool causal = true;
  Window window{};
  float softcap = 0.f;
  std::optional<float> scale;
  int beam_width = 1;  // rows b*beam_width .. +beam_width-1 of q are request b's beams
  int num_splits = 0;  // split-sequence count; 0 = heuristic
  DecodeKernel kernel = DecodeKernel::kAuto;  // CUDA
};

struct DecodeArgs {
  TensorView q;                 // [B, q_len, Hq, D], q_len 1..16, bf16/fp16
  TensorView k_cache, v_cache;  // pages (layout in pages.layout); bf16/fp16/fp8/int8
  PageTable pages;              // kv_lens include the q_len new tokens
  KVScale k_scale, v_scale;
  TensorView sinks;           // optional fp32 [Hq]
  TensorView tree_mask;       // optional bool [B, q_len, q_len]: row i = drafts query i sees
  TensorView shared_kv_lens;  // optional int32 [B / beam_width]: prefix read once for all beams
  TensorView out;             // output [B, q_len, Hq, D], q's dtype
  TensorView lse;             // output fp32 [B, q_len, Hq]
  Workspace workspace;        // decode_workspace_size() bytes, zeroed once (see Workspace)
};

// ---------------------------------------------------------------- mla
inline constexpr int kMlaLatentDim = 512;
inline constexpr int kMlaRopeDim = 64;

// The CUDA MLA kernel's schedule: the library's choice (kAuto: by the shapes, the cache dtype and
// the page size), or forced (tests, benchmarks). kSeesaw (16-bit caches only): 64-key blocks in
// pairs, both consumer warpgroups computing S; kOneConsumer: 32-key blocks, one warpgroup
// computing S; kNarrow (requests of at most 16 rows, max_seqlen_q * heads <= 16, or 32 over an
// fp8 cache; kAuto's choice for such requests over an fp8 cache): S^T = K Q^T with the keys on the
// MMA's M side. All give the same result within the tolerances; the CPU reference ignores it, but
// kSeesaw with an fp8 cache, and kNarrow over more rows, are rejected on every device
// (kNotImplemented).
enum class MlaSchedule { kAuto, kSeesaw, kOneConsumer, kNarrow };

struct MlaOptions {
  bool causal = true;
  std::optional<float> scale;  // default 1 / sqrt(512 + 64)
  int num_splits = 0;          // CUDA: key splits per (request, row tile); 0 = cost model
  MlaSchedule schedule = MlaSchedule::kAuto;  // CUDA
};

struct MlaArgs {
  TensorView q_nope;        // [total_q, H, 512]
  TensorView q_pe;          // [total_q, H, 64]
  TensorView ckv;           // [num_pages, page_size, 512]; also the value rows
  TensorView kpe;           // [num_pages, page_size, 64]
  float kv_scale = 1.f;     // fp8 e4m3 cache: real value = stored value * kv_scale
  TensorView cu_seqlens_q;  // int32 [B + 1]
  int max_seqlen_q = 0;
  PageTable pages;      // kv_lens + block table or CSR (layout is NHD by construction)
  TensorView out;       // output [total_q, H, 512]
  TensorView lse;       // output fp32 [total_q, H]
  Workspace workspace;  // CUDA: mla_workspace_size() bytes (split partial states; no zeroing)
};

// ---------------------------------------------------------------- merge
struct MergeArgs {
  TensorView o_a, lse_a;  // [T, H, D], fp32 [T, H]
  TensorView o_b, lse_b;
  TensorView out, lse;  // outputs, same shapes
};

struct MergeNArgs {
  TensorView o, lse;        // [T, n, H, D], fp32 [T, n, H]
  TensorView out, lse_out;  // outputs [T, H, D], fp32 [T, H]
};

}  // namespace hopattn
