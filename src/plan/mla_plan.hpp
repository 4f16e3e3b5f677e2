// Host plan of one MLA call: how the (request, row tile) problems are cut into CTAs along the
// keys, and the workspace the partial states need. A pure function of the shapes the host knows
// without a device sync (batch, heads, total and maximum q tokens, page-table capacity) and of
// the SM count: no tensor data is read.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hopattn/options.hpp"

namespace hopattn::plan::mla {

struct Shape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t total_q = 0;       // q tokens of all requests
  int64_t max_seqlen_q = 0;  // host bound on any request's q tokens
  int64_t max_kv_len = 0;    // host bound on any request's keys (page-table capacity)
  int num_splits = 0;        // 0: the cost model decides; else forced (clamped to kMaxSplits)
  int64_t page_size = 0;
  bool fp8_cache = false;                     // ckv / kpe in fp8 e4m3
  MlaSchedule schedule = MlaSchedule::kAuto;  // forced, or the rule of seesaw_schedule()
};

struct Plan {
  int row_tiles = 0;  // tiles of kTileRows rows per request (ceil(max_seqlen_q * H / 64))
  // The schedule: two-block ("seesaw", 64-key blocks, both consumers computing S) or one S
  // consumer over 32-key blocks: Shape::schedule when forced, else seesaw_schedule().
  bool seesaw = false;
  // Or the narrow one (requests of <= narrow_rows() rows: S^T = K Q^T over 64-key pairs), whose
  // MMAs' N is narrow_cols: 16, or 32 for 17..32 rows (fp8 caches).
  bool narrow = false;
  int narrow_cols = 16;
  int num_splits = 1;  // CTAs per problem along the keys
  // num_splits > 1: float32 partial states in the workspace, o [splits, total_q, H, 512] at
  // partial_o_offset and lse [splits, total_q, H] at partial_lse_offset, merged afterwards.
  size_t partial_o_offset = 0;
  size_t partial_lse_offset = 0;
  size_t workspace_bytes = 0;  // 0 when num_splits == 1
};

// The SM count the workspace size assumes: the largest Hopper part's, so that the size is a
// pure function of the shapes (valid for any sm_90 device). A launch on a smaller part takes at
// most that many splits.
inline constexpr int kHopperMaxSms = 132;

Plan make_plan(const Shape& shape, int num_sms);

// Whether a call with `num_splits` splits runs the seesaw schedule: 16-bit caches whose pages
// hold whole 64-key blocks (TMA boxes; smaller pages gather with cp.async, which measured 1.26x
// slower at 64 keys a block); requests of two row tiles or more (max_seqlen_q * heads >= 128),
// whose tiles share each block's bytes through L2, so that a block is compute-bound (one tile of
// 64 rows, 16 heads x 4 tokens, measured 1.02x slower, and 16 of 64 rows 1.04-1.07x); and
// splits of >= 1024 keys (batch 1 at 512 keys a split measured 1.04x slower: the pairs do not
// amortize the pipeline's start). docs/perf/mla.md, run set n.
bool seesaw_schedule(const Shape& shape, int num_splits);

// Whether the narrow schedule can run a call: every request has at most narrow_rows(fp8_cache)
// rows (max_seqlen_q * heads <= 16, or 32 over an fp8 cache), where a 64-row tile would be three
// quarters (or half) padding.
bool narrow_fits(int64_t max_seqlen_q, int64_t heads, bool fp8_cache);
bool narrow_fits(const Shape& shape);

// Whether the plan takes it by itself: fp8 caches that fit (1.09-1.12x the one-S-consumer
// schedule's speed on the 16-head memory-bound rows, with fp16 MMAs). A 16-bit cache keeps the
// one-S-consumer schedule, which measured 1.00-1.04x faster there (run set q, docs/perf/mla.md).
bool narrow_schedule(const Shape& shape);

// The shape inputs of a call, from its arguments' shapes alone (no tensor data is read).
Shape shape_of(const MlaArgs& args, const MlaOptions& opts);

}  // namespace hopattn::plan::mla
