// Decode kernel, part 1 of 3: the launch parameters and the CTA's schedule: which keys it reads
// (segments of the shared beam prefix and per-beam tails, cut into 64-key tiles and split across
// CTAs), and which of them each query row sees (masks). See README.md for the whole schedule.
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/common/device_status.cuh"
#include "kernels/common/fast_divisor.hpp"
#include "kernels/common/host_device.hpp"
#include "kernels/common/math_constants.hpp"
#include "kernels/decode/traits.hpp"

namespace hopattn::kernels::decode {

template <class T>
HOPATTN_HOST_DEVICE constexpr T smaller(T a, T b) {
  return a < b ? a : b;
}
template <class T>
HOPATTN_HOST_DEVICE constexpr T larger(T a, T b) {
  return a < b ? b : a;
}

// Which keys a query row sees (DESIGN.md): bottom-right causal, sliding window, tree mask.
struct MaskOptions {
  bool causal = true;
  int window_left = -1;  // -1 = unbounded
  int window_right = -1;
};

struct Params {
  // q [B, q_len, Hq, D] and out (same shape, q's dtype): innermost stride 1, 16-byte aligned rows.
  const void* q;
  int64_t q_stride[3];  // batch, token, head (elements)
  void* out;
  int64_t out_stride[3];
  float* lse;  // optional fp32 [B, q_len, Hq]
  int64_t lse_stride[3];

  // Paged caches as bytes (NHD and HND differ only in the slot and head strides).
  const char* k_cache;
  const char* v_cache;
  int64_t k_page_stride, k_slot_stride, k_head_stride;
  int64_t v_page_stride, v_slot_stride, v_head_stride;
  int page_size;
  FastDivisor page_div;  // FastDivisor::of(page_size): the page of a key, once per tile and lane
  int num_pages;         // pages of the pool: a page id outside [0, num_pages) is never read

  // Page list of page-table row b: block_table[b][i] or indices[indptr[b] + i].
  const int32_t* block_table;  // null: CSR
  int64_t bt_stride_row, bt_stride_page;
  int max_pages;
  const int32_t* indptr;
  int64_t indptr_stride;
  const int32_t* indices;
  int64_t indices_stride;
  int64_t num_indices;  // CSR: page_indptr's offsets must lie in [0, num_indices]
  const int32_t* kv_lens;
  int64_t kv_lens_stride;

  // Beams: rows r*W .. r*W+W-1 share their first shared_kv_lens[r] tokens (read through row
  // r*W's pages). Without shared_kv_lens every row is its own request (W = 1).
  const int32_t* shared_kv_lens;
  int64_t shared_stride;
  int beam_width;

  const uint8_t* tree_mask;  // optional bool [B, q_len, q_len]
  int64_t tree_stride[3];
  const float* sinks;  // optional fp32 [Hq]
  int64_t sinks_stride;
  const float* k_scale_per_head;  // optional fp32 [Hkv], else k_scale
  int64_t k_scale_stride;
  float k_scale;
  const float* v_scale_per_head;
  int64_t v_scale_stride;
  float v_scale;

  float softmax_scale;
  float softcap;  // 0: off
  MaskOptions mask;

  int q_len, num_kv_heads, group;
  // FastDivisor::of(group) and of(q_len) (set_divisors): a row's (beam, token, head) in two
  // multiply-highs where the runtime divisions took ~20 instructions each, on every CTA's
  // critical path at batch 1 (q loads, row masks, output stores).
  FastDivisor group_div, q_len_div;
  int rows_per_request;  // beam_width * q_len * group: (beam, token, head) rows of one KV head
  int rows_per_cta;      // 16, 32 or 64
  int row_tiles;
  int num_splits;
  FastDivisor splits_div;  // FastDivisor::of(num_splits): the tiles of a split

  // num_splits > 1: partials of every (request, KV head, row tile) = "problem" and split, and one
  // semaphore per problem (zero between launches).
  float* partial_o;    // [problems][splits][rows_per_cta][D], normalized
  float* partial_lse;  // [problems][splits][rows_per_cta], log2 domain, sink excluded
  // The last CTA of each problem to finish (counted here) merges its splits.
  uint32_t* semaphores;

  // The device status word: the first bad device-resident index is recorded there (null: not
  // recorded, as in the CPU tests).
  DeviceStatus* status;
};

// The divisors of group, q_len and num_splits, once these are set.
inline void set_divisors(Params& p) {
  p.group_div = FastDivisor::of(static_cast<uint32_t>(p.group));
  p.q_len_div = FastDivisor::of(static_cast<uint32_t>(p.q_len));
  p.splits_div = FastDivisor::of(static_cast<uint32_t>(p.num_splits));
}

// Row `row` of a request's (beam, token, head in group) rows: row = (beam * q_len + token) *
// group + head.
struct RowCoord {
  int beam, token, head;
};
HOPATTN_HOST_DEVICE RowCoord row_coord(const Params& p, int row) {
  const int bt = static_cast<int>(p.group_div.divide(static_cast<uint32_t>(row)));
  const int beam = static_cast<int>(p.q_len_div.divide(static_cast<uint32_t>(bt)));
  return {beam, bt - beam * p.q_len, row - bt * p.group};
}

// The first bad index this kernel meets (device_status.cuh).
HOPATTN_HOST_DEVICE void record_bad_index(const Params& p, StatusIndex what, int row, int position,
                                          int64_t value, int64_t bound) {
  record_violation(p.status, status_tag(StatusFamily::kDecode, what), row, position, value, bound);
}

// ------------------------------------------------------------------------------ CTA setup

// Visibility of keys for one query row (one per CTA row, in shared memory).
struct RowMask {
  int lo, hi;     // visible key range (inclusive); lo > hi: nothing
  int draft;      // first draft key (tree mask), INT_MAX without a tree mask
  int beam;       // the row's beam
  uint32_t bits;  // tree-mask row: bit t = draft key t visible
};

// The keys of one CTA as segments, each read through one page-table row. Without beams: one
// segment. With beams: the shared prefix through the first beam's pages (visible to every beam's
// rows), then each beam's own tail (visible to that beam's rows only).
struct CtaShared {
  int seg_row[kMaxSegments];        // page-table row
  int seg_lo[kMaxSegments];         // first token
  int seg_hi[kMaxSegments];         // one past the last token
  int seg_beam[kMaxSegments];       // -1: every beam
  int64_t seg_pages[kMaxSegments];  // element offset of the row's page list
  int seg_first_tile[kMaxSegments + 1];
  int num_segments;
  int tile_begin, tile_count;  // this split's tiles (global tile numbering over the segments)
  int kv_len[kMaxBeams];
  int beam_lo, beam_hi;  // beams with rows in this CTA
  // Conservative bounds over the CTA's rows: a 16-key block inside them needs no mask.
  int full_lo, full_hi, draft_min;
  uint32_t is_last;
  // A bad page id the CTA met (any one; reported after the main loop): noted in shared memory
  // so that the main loop's cold path costs no registers.
  uint32_t bad_claimed;
  int bad_page;
  uint32_t q_absmax[kWarps];       // per warp: largest |q| bit pattern (bf16 q over an 8-bit cache)
  RowMask rows[kMaxRowsPerCta];    // visibility of each CTA row (read by masked blocks only)
  float row_lse2[kMaxRowsPerCta];  // log2-domain lse without the sink
  float row_factor[kMaxRowsPerCta];  // output scale of each row
};

HOPATTN_HOST_DEVICE int min_i64_to_int(int64_t a, int64_t b) {
  const int64_t m = a < b ? a : b;
  return static_cast<int>(m > INT_MAX ? INT_MAX : (m < INT_MIN ? INT_MIN : m));
}

// Element offset of page-table row `row`'s page list: its block-table row, or its CSR segment.
HOPATTN_HOST_DEVICE int64_t page_list_at(const Params& p, int row) {
  return p.block_table != nullptr ? row * p.bt_stride_row
                                  : int64_t(p.indptr[row * p.indptr_stride]);
}

// Tokens page-table row `row` reads, checked against its page list (invalid input is recorded):
// CSR offsets outside page_indices (or decreasing) leave the row no pages, and a kv_len beyond
// what its pages hold is clamped, so the kernel never reads past the page list.
// kv_len_checked takes the length already loaded (a kernel that issues that load early).
HOPATTN_HOST_DEVICE int kv_len_checked(const Params& p, int row, int64_t len) {
  int64_t pages = p.max_pages;
  if (p.block_table == nullptr) {
    const int64_t first = p.indptr[row * p.indptr_stride];
    const int64_t last = p.indptr[(row + 1) * p.indptr_stride];
    const bool last_ok = in_closed_range(last, p.num_indices);
    if (!last_ok || !in_closed_range(first, last)) {  // together: 0 <= first <= last <= size
      record_bad_index(p, StatusIndex::kPageIndptr, row, last_ok ? row : row + 1,
                       last_ok ? first : last, p.num_indices);
      return 0;
    }
    pages = last - first;
  }
  const int64_t cap = pages * p.page_size;
  if (!in_closed_range(len, cap)) record_bad_index(p, StatusIndex::kKvLen, row, -1, len, cap);
  return len < 0 ? 0 : min_i64_to_int(len, cap);
}
HOPATTN_HOST_DEVICE int kv_len_of(const Params& p, int row) {
  return kv_len_checked(p, row, p.kv_lens[row * p.kv_lens_stride]);
}

// First key any query of a request of `kv_len` keys sees (sliding window); keys before it are
// never loaded, so evicted pages are never dereferenced.
HOPATTN_HOST_DEVICE int window_first_key(const Params& p, int kv_len) {
  if (p.mask.window_left < 0) return 0;
  const int64_t lo = int64_t(kv_len) - p.q_len - p.mask.window_left;
  return lo < 0 ? 0 : static_cast<int>(lo);
}

HOPATTN_HOST_DEVICE void setup_cta(const Params& p, CtaShared& cs, int request, int row_begin,
                                   int rows_valid, int split) {
  const int width = p.beam_width;
  cs.beam_lo = row_coord(p, row_begin).beam;
  cs.beam_hi = row_coord(p, row_begin + rows_valid - 1).beam;
  int shortest = INT_MAX;
  for (int w = 0; w < width; ++w) {
    cs.kv_len[w] = kv_len_of(p, request * width + w);
    shortest = smaller(shortest, cs.kv_len[w]);
  }

  int n = 0, tiles = 0;
  auto add_segment = [&](int row, int lo, int hi, int beam) {
    if (hi <= lo) return;
    cs.seg_row[n] = row;
    cs.seg_lo[n] = lo;
    cs.seg_hi[n] = hi;
    cs.seg_beam[n] = beam;
    cs.seg_pages[n] = page_list_at(p, row);
    cs.seg_first_tile[n] = tiles;
    tiles += (hi - lo + kTileTokens - 1) / kTileTokens;
    ++n;
  };
  if (width == 1) {
    add_segment(request, window_first_key(p, cs.kv_len[0]), cs.kv_len[0], -1);
  } else {
    int shared = p.shared_kv_lens[request * p.shared_stride];
    if (!in_closed_range(shared, shortest)) {
      record_bad_index(p, StatusIndex::kSharedKvLen, request, -1, shared, shortest);
    }
    shared = larger(0, smaller(shared, shortest));
    int lo = INT_MAX;
    for (int w = cs.beam_lo; w <= cs.beam_hi; ++w)
      lo = smaller(lo, window_first_key(p, cs.kv_len[w]));
    add_segment(request * width, lo, shared, -1);
    for (int w = cs.beam_lo; w <= cs.beam_hi; ++w) {
      add_segment(request * width + w, larger(shared, window_first_key(p, cs.kv_len[w])),
                  cs.kv_len[w], w);
    }
  }
  cs.num_segments = n;
  cs.seg_first_tile[n] = tiles;
  cs.bad_claimed = 0;
  // Splits of q or q + 1 tiles (the first r take one more), in 32-bit arithmetic: two 64-bit
  // divisions here cost thread 0 ~60 instructions while the CTA waited at its first barrier.
  const int q = static_cast<int>(p.splits_div.divide(static_cast<uint32_t>(tiles)));
  const int r = tiles - q * p.num_splits;
  cs.tile_begin = split * q + smaller(split, r);
  cs.tile_count = q + (split < r ? 1 : 0);

  // Mask-free bounds: every row sees [full_lo, full_hi] below draft_min (rows of any query token
  // i of any of the CTA's beams; a row's diagonal is kv_len - q_len + i).
  int64_t full_lo = 0, full_hi = INT_MAX, draft_min = INT_MAX;
  for (int w = cs.beam_lo; w <= cs.beam_hi; ++w) {
    const int64_t kv_len = cs.kv_len[w];
    const int64_t first_diag = kv_len - p.q_len, last_diag = kv_len - 1;
    if (p.mask.window_left >= 0) full_lo = larger(full_lo, last_diag - p.mask.window_left);
    int64_t hi = kv_len - 1;
    if (p.tree_mask == nullptr && p.mask.causal) hi = smaller(hi, first_diag);
    if (p.mask.window_right >= 0) hi = smaller(hi, first_diag + p.mask.window_right);
    full_hi = smaller(full_hi, hi);
    if (p.tree_mask != nullptr) draft_min = smaller(draft_min, first_diag);
  }
  cs.full_lo = min_i64_to_int(full_lo, INT_MAX);
  cs.full_hi = min_i64_to_int(full_hi, INT_MAX);
  cs.draft_min = min_i64_to_int(draft_min, INT_MAX);
}

// ------------------------------------------------------------------------------ small grids

// The keys of one CTA of the small-grid kernel (small_kernel.cuh; beam width 1, no tree mask,
// one row tile): split `split` of the request's visible range in 16-key blocks (q or q + 1
// blocks a split, the first r take one more), and warp `warp`'s share of them: blocks warp,
// warp + kWarps, ... Every thread computes it (no thread-0 setup to wait for).
struct SmallRange {
  int kv_len;
  int lo, hi;      // the split's keys [lo, hi)
  int warp_first;  // first key of the warp's first block
  int blocks;      // the warp's blocks
  int64_t pages;   // element offset of the request's page list
  // Keys every row sees (row_mask's bounds over the rows; the first query's diagonal is the
  // smallest): a block inside [full_lo, full_hi] and below hi needs no mask.
  int full_lo, full_hi;
};

// Keys [full_lo, full_hi] every row of a request of `kv_len` keys sees (beam width 1, no tree
// mask: the first query's diagonal is the smallest), so a block inside them needs no mask.
HOPATTN_HOST_DEVICE void unmasked_keys(const Params& p, int kv_len, int& full_lo, int& full_hi) {
  const int first_diag = kv_len - p.q_len;
  full_lo = p.mask.window_left >= 0 ? larger(0, kv_len - 1 - p.mask.window_left) : 0;
  full_hi = kv_len - 1;
  if (p.mask.causal) full_hi = smaller(full_hi, first_diag);
  if (p.mask.window_right >= 0) full_hi = smaller(full_hi, first_diag + p.mask.window_right);
}

HOPATTN_HOST_DEVICE SmallRange small_range(const Params& p, int request, int split, int warp,
                                           int kv_len_loaded) {
  SmallRange r;
  r.kv_len = kv_len_checked(p, request, kv_len_loaded);
  const int first = window_first_key(p, r.kv_len);
  const int total = (r.kv_len - first + kBlockTokens - 1) / kBlockTokens;
  const int q = static_cast<int>(p.splits_div.divide(static_cast<uint32_t>(total)));
  const int rem = total - q * p.num_splits;
  const int begin = split * q + smaller(split, rem);
  const int count = q + (split < rem ? 1 : 0);
  r.lo = first + begin * kBlockTokens;
  r.hi = smaller(r.kv_len, r.lo + count * kBlockTokens);
  r.warp_first = r.lo + warp * kBlockTokens;
  r.blocks = count > warp ? (count - warp + kWarps - 1) / kWarps : 0;
  r.pages = page_list_at(p, request);
  unmasked_keys(p, r.kv_len, r.full_lo, r.full_hi);
  return r;
}

// ------------------------------------------------------------------------------ tiles

// One tile (up to 64 keys) of the CTA's key stream.
struct TileInfo {
  int segment;
  int start, end;  // key positions [start, end) in the row's sequence
  int beam;
};

HOPATTN_HOST_DEVICE TileInfo tile_info(const CtaShared& cs, int k) {
  const int t = cs.tile_begin + k;
  int s = 0;
  while (s + 1 < cs.num_segments && cs.seg_first_tile[s + 1] <= t) ++s;
  const int start = cs.seg_lo[s] + (t - cs.seg_first_tile[s]) * kTileTokens;
  return {s, start, smaller(start + kTileTokens, cs.seg_hi[s]), cs.seg_beam[s]};
}

HOPATTN_HOST_DEVICE RowMask row_mask(const Params& p, const CtaShared& cs, int request, int row) {
  RowMask m{1, 0, INT_MAX, -2, 0u};
  if (row >= p.rows_per_request) return m;  // padding row of the last row tile
  const RowCoord c = row_coord(p, row);
  const int w = c.beam, i = c.token;
  const int64_t kv_len = cs.kv_len[w];
  const int64_t diag = kv_len - p.q_len + i;
  int64_t hi = kv_len - 1;
  if (p.tree_mask == nullptr && p.mask.causal) hi = smaller(hi, diag);
  if (p.mask.window_right >= 0) hi = smaller(hi, diag + p.mask.window_right);
  const int64_t lo = p.mask.window_left >= 0 ? larger(int64_t(0), diag - p.mask.window_left) : 0;
  m.lo = min_i64_to_int(lo, INT_MAX);
  m.hi = min_i64_to_int(hi, INT_MAX);
  m.beam = w;
  if (p.tree_mask != nullptr) {
    m.draft = static_cast<int>(kv_len - p.q_len);
    const uint8_t* t =
        p.tree_mask + (request * p.beam_width + w) * p.tree_stride[0] + i * p.tree_stride[1];
    for (int j = 0; j < p.q_len; ++j) m.bits |= (t[j * p.tree_stride[2]] != 0 ? 1u : 0u) << j;
  }
  return m;
}

// Branch-free (bitwise & and |): a masked block evaluates it for 8 (row, key) pairs a lane, and
// short-circuit code compiled to ~15 branches each. key - draft is below 32 wherever key >= draft
// (draft keys are the last q_len <= 16 keys), so the & 31 only keeps the shift defined elsewhere.
HOPATTN_HOST_DEVICE bool key_visible(const RowMask& m, int key, int beam) {
  const bool in_range = (key >= m.lo) & (key <= m.hi);
  const bool same_beam = (beam < 0) | (beam == m.beam);
  const bool tree_ok =
      (key < m.draft) | (((m.bits >> (static_cast<unsigned>(key - m.draft) & 31u)) & 1u) != 0);
  return in_range & same_beam & tree_ok;
}

}  // namespace hopattn::kernels::decode
