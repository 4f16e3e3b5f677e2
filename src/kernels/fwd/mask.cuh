// Which keys the queries of a work tile see: sequence geometry of the tile (dense or varlen),
// its range of KV blocks, and the per-element mask of an S tile. One rule everywhere (DESIGN.md):
// query i of q_len sees key j iff j < kv_len and, with diag = i + kv_len - q_len,
// diag - window_left <= j <= diag + window_right (a bound of -1 is unbounded; causal is right 0).
#pragma once

#include <cmath>

#include "kernels/common/device_status.cuh"
#include "kernels/common/offset_range.hpp"
#include "kernels/fwd/traits.cuh"
#include "kernels/fwd/work_tile.cuh"
#include "plan/batch_tiles.hpp"

namespace hopattn::kernels::fwd {

// Computed identically by the producer and the consumers from the work tile alone. A tile covers
// q positions [q_start, q_start + positions) (PackParams: `pack` rows per position with GQA
// packing, one otherwise); masks work on q positions, stores on tile rows 0..127.
struct TileInfo {
  int seqlen_q, seqlen_k;
  int row_q, row_k;  // first row of the sequence along TMA's S coordinate (varlen offset; 0 paged)
  int batch_coord;   // TMA's B coordinate (dense: the batch; varlen: 0)
  int q_start;       // first q position of the tile within the sequence
  int q_last;        // last q position of the tile that exists (< q_start: none)
  int n_block_min, n_block_max;  // KV blocks [min, max) that hold visible keys
  int kv_lo, kv_hi;  // the work tile's own key range (a batch KV split; else 0, INT32_MAX)

  __device__ bool has_rows() const { return q_start < seqlen_q; }
  __device__ int n_blocks() const { return n_block_max - n_block_min; }
  // Tile rows 0 .. rows() - 1 hold existing (position, head) pairs.
  __device__ int rows(const FwdParams& p) const { return (q_last + 1 - q_start) * p.pack.pack; }
};

// The rows and KV blocks of a tile whose sequence geometry (lengths, offsets) is already in `t`:
// positions [q_start, q_last] and the blocks that hold keys some row sees, within the tile's own
// key range.
template <class Traits>
__device__ __forceinline__ void set_tile_range(const FwdParams& p, const WorkTile& w, int q_start,
                                               TileInfo& t) {
  t.q_start = q_start;
  t.q_last = min(t.q_start + p.pack.positions, t.seqlen_q) - 1;
  t.kv_lo = w.kv_begin;
  t.kv_hi = w.kv_end;
  const int diag = t.seqlen_k - t.seqlen_q;
  int col_end = min(t.seqlen_k, w.kv_end);  // exclusive bound over the tile's rows
  if (p.mask.window_right >= 0) col_end = min(col_end, t.q_last + diag + p.mask.window_right + 1);
  int col_begin = w.kv_begin;
  if (p.mask.window_left >= 0) col_begin = max(col_begin, t.q_start + diag - p.mask.window_left);
  t.n_block_max = col_end > 0 ? (col_end + Traits::kBlockN - 1) / Traits::kBlockN : 0;
  t.n_block_min = min(max(col_begin, 0) / Traits::kBlockN, t.n_block_max);
}

// The first consumer thread of the CTA notes a bad device-resident index (kReport) in the CTA's
// shared-memory note (SharedPlan::index_note; the first one is kept), and reports the note after
// its last tile (report_index_note). No call at the tile start: a call there made ptxas
// schedule the consumers' KV-block loop ~9% longer (936 -> 1024 instructions at hd128), and
// nothing else reports, so that the producer warpgroup's 24 registers hold no call.
template <bool kReport>
__device__ __forceinline__ void report_index(const FwdParams& p, DeviceStatus* note,
                                             StatusIndex index, int request, int position,
                                             int64_t value, int64_t bound) {
  if (kReport && threadIdx.x == 128) {
    keep_first_violation(note, status_tag(p.status_family, index), request, position, value, bound);
  }
}

// Thread 128, after its last tile: the note into the status word.
__device__ __forceinline__ void report_index_note(const FwdParams& p, const DeviceStatus* note) {
  if (threadIdx.x == 128 && note->tag != 0u) {
    record_violation(p.status, note->tag, note->request, note->position, note->value, note->bound);
  }
}

// [row, row + len) of request b from an offsets array (cu_seqlens, CSR page_indptr), clamped
// (offset_range); kReport: the consumers' instance records a bad pair.
template <bool kReport>
__device__ __forceinline__ void varlen_range(const FwdParams& p, DeviceStatus* note, const int* cu,
                                             int total, int b, StatusIndex index, int& row,
                                             int& len) {
  const OffsetRange r = offset_range(cu, total, b);
  row = r.row;
  len = r.len;
  if (kReport && !r.ok) report_index<kReport>(p, note, index, b, r.position, r.value, total);
}

// Paged CSR: the first of request b's entries in page_indices, clamped into the array as
// varlen_range clamps it (the loader's page_list). A kv_len is clamped to the tokens its list can
// hold, so that no page-list entry past the list (or the array) is read.
__device__ __forceinline__ int csr_first(const FwdParams& p, int b) {
  return min(max(p.kv.page_indptr[b], 0), p.kv.num_page_indices);
}

// Device-resident lengths and offsets are clamped where they are read, the same way by the
// producer and the consumers (the pipeline needs both to see one geometry): nothing is read or
// written through a bad entry; the consumers' kReport instance records it.
template <class Traits, bool kReport = false>
__device__ __forceinline__ TileInfo make_tile_info(const FwdParams& p, const WorkTile& w,
                                                   DeviceStatus* note = nullptr) {
  TileInfo t;
  if (p.seq.cu_seqlens_q != nullptr) {
    varlen_range<kReport>(p, note, p.seq.cu_seqlens_q, p.seq.total_q, w.batch,
                          StatusIndex::kCuSeqlensQ, t.row_q, t.seqlen_q);
    if (p.kv.kv_lens != nullptr) {  // paged: keys are addressed through the page list
      t.row_k = 0;
      int pages = p.kv.pages_per_row;
      if (p.kv.block_table == nullptr) {  // CSR: the request's range of page_indices
        int first;
        varlen_range<kReport>(p, note, p.kv.page_indptr, p.kv.num_page_indices, w.batch,
                              StatusIndex::kPageIndptr, first, pages);
      }
      const int kv_len = p.kv.kv_lens[w.batch];
      const int capacity = pages * p.kv.page_size;
      if (kReport && !in_closed_range(kv_len, capacity)) {
        report_index<kReport>(p, note, StatusIndex::kKvLen, w.batch, -1, kv_len, capacity);
      }
      t.seqlen_k = min(max(kv_len, 0), capacity);
    } else {
      varlen_range<kReport>(p, note, p.seq.cu_seqlens_k, p.seq.total_k, w.batch,
                            StatusIndex::kCuSeqlensK, t.row_k, t.seqlen_k);
    }
    t.batch_coord = 0;
  } else {
    t.row_q = 0;
    t.row_k = 0;
    t.seqlen_q = p.seq.seqlen_q;
    t.seqlen_k = p.seq.seqlen_k;
    t.batch_coord = w.batch;
  }
  set_tile_range<Traits>(p, w, w.m_block * p.pack.positions, t);
  return t;
}

// Where tile row `row` (0..127) lives in q, out and lse: its q position within the sequence and
// its q head (without packing: q_start + row and the tile's head).
struct RowAddress {
  int q_pos, head;
};

__device__ __forceinline__ RowAddress row_address(const FwdParams& p, const WorkTile& w,
                                                  const TileInfo& t, int row) {
  const int offset = static_cast<int>(p.pack.pack_div.divide(static_cast<uint32_t>(row)));
  return RowAddress{t.q_start + offset, w.head * p.pack.pack + row - offset * p.pack.pack};
}

// The key range one query position sees, as [col_lo, col_hi).
struct RowLimits {
  int col_lo, col_hi;
};

__device__ __forceinline__ RowLimits row_limits(const FwdParams& p, const TileInfo& t, int q_pos) {
  const int diag = q_pos + t.seqlen_k - t.seqlen_q;
  RowLimits r;
  r.col_hi = t.seqlen_k;
  if (p.mask.window_right >= 0) r.col_hi = min(r.col_hi, diag + p.mask.window_right + 1);
  r.col_lo = p.mask.window_left >= 0 ? diag - p.mask.window_left : 0;
  r.col_hi = min(r.col_hi, t.kv_hi);
  r.col_lo = max(r.col_lo, t.kv_lo);
  return r;
}

// True when some element of KV block n_block is hidden from some row of the tile: only such
// blocks pay for the per-element mask.
// bwd/workspace.hpp BlockGeometry::needs_mask states the same rule in int64_t over q tiles of
// block_m rows. They stay two: every shared form tried (a template on the integer type in a
// HOPATTN_HOST_DEVICE header, with the window read lazily and the last row behind a callable)
// kept this kernel's code but changed the bwd kernel's (.nv_fatbin bytes), whose last row
// min((m + 1) block_m, q_len) - 1 is computed between the two window tests. Change both together.
template <class Traits>
__device__ __forceinline__ bool block_needs_mask(const FwdParams& p, const TileInfo& t,
                                                 int n_block) {
  const int n_lo = n_block * Traits::kBlockN;
  const int n_hi = n_lo + Traits::kBlockN;  // exclusive
  const int diag = t.seqlen_k - t.seqlen_q;
  if (n_hi > t.seqlen_k) return true;
  // A KV split's bounds fall on kKvChunkKeys multiples: inside a block only where kBlockN does
  // not divide that (80-key blocks at head dim 256).
  if constexpr (plan::kKvChunkKeys % Traits::kBlockN != 0) {
    if (n_lo < t.kv_lo || n_hi > t.kv_hi) return true;
  }
  if (p.mask.window_right >= 0 && n_hi - 1 > t.q_start + diag + p.mask.window_right) return true;
  if (p.mask.window_left >= 0 && n_lo < t.q_last + diag - p.mask.window_left) return true;
  return false;
}

// Sets hidden elements of a consumer thread's S registers to -inf. Register i holds row half
// (i >> 1) & 1 and column 8 * (i >> 2) + 2 * (lane % 4) + (i & 1) of the 64 x kBlockN tile.
// The bounds are taken relative to the thread's first column, so that each test compares a row's
// register with the register's constant column offset (one ISETP with an immediate, no column
// arithmetic). kLeft: some row's left bound may fall inside the block (a window's left edge or
// a KV split's start); without it, as on every causal block, only the right bound is tested:
// one compare and one select an element instead of two compares and a select.
template <class Traits, bool kLeft>
__device__ __forceinline__ void apply_mask(float (&s)[Traits::kSRegs], const RowLimits (&rows)[2],
                                           int n_block, int lane) {
  const int col0 = n_block * Traits::kBlockN + 2 * (lane % 4);
  const int hi[2] = {rows[0].col_hi - col0, rows[1].col_hi - col0};
  const int lo[2] = {rows[0].col_lo - col0, rows[1].col_lo - col0};
#pragma unroll
  for (int i = 0; i < Traits::kSRegs; ++i) {
    const int c = 8 * (i >> 2) + (i & 1);
    const int h = (i >> 1) & 1;
    if (c >= hi[h] || (kLeft && c < lo[h])) s[i] = -INFINITY;
  }
}

// Whether block n_block needs apply_mask's left test: a window's left edge, or a KV split whose
// start lies past the block's first key (row_limits raises col_lo to kv_lo).
template <class Traits>
__device__ __forceinline__ bool mask_has_left(const FwdParams& p, const TileInfo& t, int n_block) {
  return p.mask.window_left >= 0 || t.kv_lo > n_block * Traits::kBlockN;
}

}  // namespace hopattn::kernels::fwd
