// KV block loads of the fwd producer: the rows of K or V that KV block n of a tile puts into a
// ring stage, from contiguous tensors (dense, varlen) or from a paged cache. Every row past the
// sequence's end arrives as zeros, for K and for V: masking S alone would leave P = 0 times
// whatever sits there, and 0 * NaN or 0 * Inf is NaN.
//
// How rows past the end become zeros (V's: K's rows there only meet masked columns of S, which
// the mask overwrites):
// - dense: the sequence is a whole dimension of the 4-D tensor map, TMA zero-fills past it.
// - varlen: the tile's last block, when the sequence ends inside it, arrives with the next
//   sequence's rows (or zeros past the tensor's end); the consumers zero V's rows past the end
//   before their first P V (FwdMainloop::zero_v_tail).
// - paged, TMA: one box per page piece of `box_rows` tokens through a map based at the pool; the
//   piece holding the end is loaded whole (slots past the end may hold anything, even NaN), and
//   the consumers zero V's rows past the end as for varlen. Boxes wholly past the end are issued
//   out of bounds (zeros, bytes counted).
// - paged, gather: cp.async with a source size of 0 writes 16 zero bytes.
//
// Gather schedule: the producer thread walks the tiles as for TMA, but for each KV block it only
// waits for the K stage to be free and publishes a GatherJob in that stage's slot (job_full);
// producer warps 1..3 take the jobs in order, gather K, wait for the V stage, gather V. A job
// slot is rewritten only after the consumers freed its K stage, by which time the gather warps
// have read it (their K arrivals come after the read).
//
// Maps based before their tensor (an earlier design moved a windowed map's base back so that TMA
// would zero the rows past the end) are avoided: measured on an H200, such a map faulted for
// tensors at the very start of their device allocation once a box held out-of-bounds rows.
#pragma once

#include <cstdint>

#include "kernels/common/device_status.cuh"
#include "kernels/fwd/mask.cuh"
#include "kernels/fwd/traits.cuh"
#include "kernels/fwd/work_tile.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/dequant.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/tma.cuh"

namespace hopattn::kernels::fwd {

template <class Traits>
struct KVLoader {
  using Elt = typename Traits::Elt;
  static constexpr int kBlockN = Traits::kBlockN;

  // Where one tile's keys live; computed once per tile by each producer thread.
  struct Source {
    int kv_head;
    int row_k;        // contiguous: first row of the sequence along TMA's S coordinate
    int batch_coord;  // contiguous: TMA's B coordinate
    int seqlen_k;
    int batch;
    const int* pages;  // paged TMA: the request's physical pages, in token order
  };

  // A page id outside the pool, met by a lane of producer warp w: noted as {request + 1, page} in
  // the warp's note (SharedPlan::bad_page_note; any lane's note is kept), and recorded once
  // after the warp's last tile (report_bad_page), not in the loop, where a call would cost the
  // producer warpgroup's 24 registers.
  __device__ static void note_bad_page(int2* note, int request, int page) {
    ptx::st_shared_v2(ptx::smem_address(note), static_cast<uint32_t>(request + 1),
                      static_cast<uint32_t>(page));
  }
  // One lane of the warp whose note it is, after a __syncwarp().
  __device__ static void report_bad_page(const FwdParams& p, const int2* note) {
    const int2 n = *note;
    if (n.x != 0) {
      record_violation(p.status, status_tag(p.status_family, StatusIndex::kPage), n.x - 1, -1, n.y,
                       p.kv.num_pages);
    }
  }

  // Paged: request b's physical pages, in token order.
  __device__ static const int* page_list(const FwdParams& p, int b) {
    return p.kv.block_table != nullptr ? p.kv.block_table + b * p.kv.block_table_stride
                                       : p.kv.page_indices + csr_first(p, b);
  }

  // Paged TMA: this lane's box of a KV block (at most one a lane: kBlockN / 8 boxes), its page
  // id read one block ahead of its copy (read_box), so that the page-table read is in flight
  // while the producer waits for the stage to free instead of after it.
  struct PagedBox {
    int page = 0;  // the slot within the page is recomputed at the copy (a register less held)
  };
  static_assert(kBlockN / 8 <= 32, "paged TMA: one box a lane of the producer warp");
  // The first row of this lane's box in a KV block (kBlockN or more: the lane has no box).
  __device__ static int box_row(const FwdParams& p) {
    return static_cast<int>(ptx::lane_id()) * p.kv.box_rows;
  }
  __device__ static PagedBox read_box(const FwdParams& p, const Source& s, int n) {
    PagedBox b;
    const int row = box_row(p);
    const int token = n * kBlockN + row;
    if (row < kBlockN && token < s.seqlen_k) {  // page-list entries past the length: never read
      b.page = s.pages[p.kv.page_div.divide(token)];
    }
    return b;
  }
  // A page id outside the pool, in a box that holds keys (`valid`), noted for the report; with
  // `&`, so that ptxas predicates the note's store. TMA never reads through such an id anyway
  // (it lies outside the map's page dimension: TMA writes zeros).
  __device__ static void note_if_outside(const FwdParams& p, const Source& s, bool valid,
                                         const PagedBox& box, int2* note) {
    if (valid & (static_cast<uint32_t>(box.page) >= static_cast<uint32_t>(p.kv.num_pages))) {
      note_bad_page(note, s.batch, box.page);
    }
  }

  template <KVSource kSource>
  __device__ static Source source(const FwdParams& p, const WorkTile& w, const TileInfo& t) {
    Source s{w.head / p.kv_head_divisor, t.row_k, t.batch_coord, t.seqlen_k, w.batch, nullptr};
    if constexpr (kSource == KVSource::kPagedTma || kSource == KVSource::kPagedTmaWiden) {
      s.pages = page_list(p, w.batch);
    }
    return s;
  }

  // The TMA boxes of KV block n, kPanels panels of 64 columns, into `stage`, completing on `bar`
  // (whose expect_tx the leading thread raises by the full stage's bytes). Contiguous: one
  // thread; paged: every lane of the producer warp. kPagedTmaWiden: kPanels boxes of 128 fp8
  // codes a row (kColStep 128) into panels kFirstPanel.. of the stage, unswizzled: each row's
  // codes in the bytes its widened values will occupy (copy_codes' layout, CodeLayout).
  // Paged: `box` is this lane's read_box(p, s, n).
  template <KVSource kSource, int kPanels, int kFirstPanel = 0, int kColStep = Traits::kPanelCols>
  __device__ static void tma_block(const FwdParams& p, const CUtensorMap* map, uint8_t* stage,
                                   uint64_t* bar, const Source& s, int n, int2* note,
                                   const PagedBox& box = PagedBox{}) {
    const int first = n * kBlockN;
    if constexpr (kSource == KVSource::kContiguous) {
#pragma unroll
      for (int i = 0; i < kPanels; ++i) {
        ptx::tma_load_4d(stage + i * Traits::kKVPanelBytes, map, bar, i * Traits::kPanelCols,
                         s.kv_head, s.row_k + first, s.batch_coord);
      }
    } else {
      // Paged: box_rows divides both the page size and kBlockN, so a box never crosses a page,
      // and it is a multiple of 8 rows, so every box starts on a 1024-byte swizzle atom. The map
      // (launch.cu, paged_spec) is based at the pool; a box at (r = 0, w = slot) holds slots
      // slot .. slot + box - 1 of the page. A box holding the sequence's end is loaded whole:
      // its slots past the end hold whatever the cache has there (the consumers mask those keys
      // in S and zero those V rows, FwdMainloop::zero_v_tail). A box wholly past the end is
      // issued at r = box, out of bounds: zeros, its bytes counted all the same. One box a lane
      // of the producer warp (at most kBlockN / 8 = 22), so that a block's page-table reads are
      // in flight together, and read one block ahead (read_box).
      const int rows = p.kv.box_rows;
      const int row = box_row(p);
      if (row >= kBlockN) return;
      const int token = first + row;
      const bool valid = token < s.seqlen_k;
      const int slot =
          valid ? token - static_cast<int>(p.kv.page_div.divide(token)) * p.kv.page_size : 0;
      // Page ids outside the pool: kPagedTma's producer warp 1 checks them for the report
      // (audit_box); kPagedTmaWiden, whose warps 1..3 widen, here.
      if constexpr (kSource == KVSource::kPagedTmaWiden) note_if_outside(p, s, valid, box, note);
      const int r = valid ? 0 : rows;
      uint8_t* dst = stage + kFirstPanel * Traits::kKVPanelBytes + row * Traits::kRowBytes;
#pragma unroll
      for (int i = 0; i < kPanels; ++i) {
        const int col = i * kColStep;
        if (p.kv.hnd) {
          ptx::tma_load_5d(dst + i * Traits::kKVPanelBytes, map, bar, col, r, slot, s.kv_head,
                           box.page);
        } else {
          ptx::tma_load_5d(dst + i * Traits::kKVPanelBytes, map, bar, col, s.kv_head, r, slot,
                           box.page);
        }
      }
    }
  }

  // kPagedTma: this lane's page id of block n (read_box), checked for the report by producer
  // warp 1 (FwdMainloop::load_tile_v), as tma_block does it for kPagedTmaWiden.
  __device__ static void audit_box(const FwdParams& p, const Source& s, int n, const PagedBox& box,
                                   int2* note) {
    const int row = box_row(p);
    note_if_outside(p, s, (row < kBlockN) & (n * kBlockN + row < s.seqlen_k), box, note);
  }

  // Where a gathered 16-byte piece of token `token` (before the sequence's end; page-list entry
  // `index` named page id `page`) comes from, `head_offset` elements into its row: sets `src` and
  // returns 16, the bytes to copy; for a page id outside the pool returns 0 (copy zeros), leaves
  // `src` alone (the pool is never read through the bad id) and notes it.
  template <class T>
  __device__ static uint32_t piece_source(const FwdParams& p, const PoolParams& pool, const T* base,
                                          uint32_t page, uint32_t index, uint32_t token,
                                          uint32_t head_offset, int batch, int2* note,
                                          const T*& src) {
    if (page >= static_cast<uint32_t>(p.kv.num_pages)) {
      note_bad_page(note, batch, static_cast<int>(page));
      return 0;
    }
    const uint32_t slot = token - index * p.kv.page_size;
    src = base + static_cast<uint64_t>(page) * pool.page_stride +
          (slot * pool.slot_stride + head_offset);
    return 16;
  }

  // The kGatherThreads gather threads (tid 0..95), before a job's copies: the page-list entries
  // of KV block job.n_block from its first token's on, as gather_block reads them (entry
  // index - first_index). With pages of fewer than kBlockN / kStagedIdsMin tokens (8 at
  // 128-key blocks; SGLang's 1 among them) the entries before seqlen_k are first staged into
  // `ids`, a thread an entry, all in flight together, then a barrier of the gather threads: read
  // per row from the global page list, each lookup sat between two copies (a copy is a memory
  // barrier to the compiler) and waited alone, and with pages of 1 that is every row (decode
  // with pages of 1: 1.29x faster staged, H100, docs/perf/NOTES.md run set af). With larger
  // pages the rows' lookups hit the same few entries in L1, and the staging's barrier and extra
  // round trip cost more (pages of 16 by the gather: 1.10-1.13x slower staged). The choice is
  // the launch's (the page size), so every job of it stages: a stage's ids are rewritten two
  // jobs later, after every gather thread passed the next job's barrier, hence after its copies
  // of this job.
  static constexpr int kStagedIdsMin = 16;
  __device__ static const int* block_page_ids(const FwdParams& p, const GatherJob& job, int* ids,
                                              uint32_t tid) {
    const uint32_t first = job.n_block * kBlockN;
    const uint32_t first_index = p.kv.page_div.divide(first);
    const int* pages = page_list(p, job.batch) + first_index;
    if (p.kv.page_size * kStagedIdsMin >= kBlockN) return pages;
    const uint32_t end = min(first + kBlockN, static_cast<uint32_t>(job.seqlen_k));
    if (first < end) {  // page-list entries past the length are never read
      const uint32_t count = p.kv.page_div.divide(end - 1) - first_index + 1;
#pragma unroll 1
      for (uint32_t i = tid; i < count; i += Traits::kGatherThreads) ids[i] = pages[i];
    }
    ptx::named_barrier_sync(kGatherIds, Traits::kGatherThreads);
    return ids;
  }

  // The kGatherThreads gather threads (tid 0..95): KV block job.n_block, kCols columns, copied 16
  // bytes per cp.async into the 128B-swizzled panels at shared address `stage` (the layout TMA
  // would have written: 16-byte chunk c of row r at chunk c ^ (r % 8)), then one arrival per
  // thread on `bar` once its copies landed. A thread keeps one chunk and walks rows
  // kRowsPerRound apart, so it looks up one page per row, in `ids` (block_page_ids).
  template <int kCols>
  __device__ static void gather_block(const FwdParams& p, const PoolParams& pool, uint32_t stage,
                                      uint64_t* bar, const GatherJob& job, const int* ids,
                                      uint32_t tid, int2* note) {
    constexpr uint32_t kChunks = kCols / 8;  // 16-byte pieces per row
    constexpr uint32_t kRowsPerRound = Traits::kGatherThreads / kChunks;
    static_assert(Traits::kGatherThreads % kChunks == 0, "gather: whole rows per round");
    // Derived from an opaque copy of tid so that the compiler recomputes these per block instead
    // of hoisting both K's and V's out of the job loop (the producer warpgroup has 24 registers).
    tid = ptx::opaque(tid);
    const uint32_t chunk = tid % kChunks;
    const uint32_t head_offset = job.kv_head * pool.head_stride + chunk * 8;
    const uint32_t first = job.n_block * kBlockN;
    const uint32_t end = job.seqlen_k;
    const uint32_t first_index = p.kv.page_div.divide(first);
    const Elt* base = static_cast<const Elt*>(pool.base);
#pragma unroll 1
    for (uint32_t row = tid / kChunks; row < kBlockN; row += kRowsPerRound) {
      const uint32_t token = first + row;
      const Elt* src = base;
      uint32_t bytes = 0;
      if (token < end) {  // page-list entries past the length are never read
        const uint32_t index = p.kv.page_div.divide(token);
        bytes = piece_source(p, pool, base, ids[index - first_index], index, token, head_offset,
                             job.batch, note, src);
      }
      ptx::cp_async_16(stage + (chunk / 8) * Traits::kKVPanelBytes + row * Traits::kRowBytes +
                           (((chunk % 8) ^ (row % 8)) << 4),
                       src, static_cast<int>(bytes));
    }
    ptx::cp_async_mbarrier_arrive_noinc(bar);
  }

  // kFp8KV, in two steps so that K's and V's copies of a block are in flight together
  // (mainloop.cuh, gather_jobs). copy_codes: KV block job.n_block's kCols fp8 e4m3 columns, 16
  // codes a cp.async, by the kGatherThreads gather threads as gather_block copies (rows past the
  // end and bad page ids as zero codes), each row's codes into the bytes its own widened row will
  // occupy: its last kRawSlots 128-byte panel rows, unswizzled (hd64: the first 64 bytes of its
  // one panel row). widen_codes, once this thread's copies of the block landed: each thread reads
  // back the chunks it copied and, after every lane of the row has read its own (__syncwarp: a
  // row's lanes are one warp's, and a row's widened chunks overwrite its codes), stores their 16
  // exact values in Elt as two swizzled 16-byte chunks (the layout gather_block writes), then
  // arrives on `bar`. No barrier beyond the warp: no thread reads bytes another warp wrote.
  // kThreads: the threads that copy or widen (the gather warps; consumer 1's 128 for V,
  // mainloop.cuh, widen_v_or_arrive).
  template <int kCols, int kThreads = Traits::kGatherThreads>
  struct CodeLayout {
    static constexpr uint32_t kChunks = kCols / 16;  // 16-code pieces per row
    static_assert(32 % kChunks == 0, "widen: a row's lanes within one warp");
    static constexpr uint32_t kRowsPerRound = kThreads / kChunks;
    static constexpr uint32_t kPanels = kCols / Traits::kPanelCols;
    static constexpr uint32_t kRawSlots = kCols >= 128 ? kCols / 128 : 1;
    // Codes of chunk j of row r: byte 16 (j % 8) of row r in panel kPanels - kRawSlots + j / 8.
    __device__ static uint32_t raw(uint32_t stage, uint32_t chunk) {
      return stage + (kPanels - kRawSlots + chunk / 8) * Traits::kKVPanelBytes + (chunk % 8) * 16;
    }
  };

  template <int kCols>
  __device__ static void copy_codes(const FwdParams& p, const PoolParams& pool, uint32_t stage,
                                    const GatherJob& job, uint32_t tid, int2* note) {
    using L = CodeLayout<kCols>;
    tid = ptx::opaque(tid);
    const uint32_t chunk = tid % L::kChunks;
    const uint32_t head_offset = job.kv_head * pool.head_stride + chunk * 16;
    const uint32_t first = job.n_block * kBlockN;
    const uint32_t end = job.seqlen_k;
    const int* pages = page_list(p, job.batch);
    const uint8_t* base = static_cast<const uint8_t*>(pool.base);
    const uint32_t raw = L::raw(stage, chunk);
    // Rows kInFlight at a time: their page ids are read together before their copies (a copy
    // is a memory barrier to the compiler: one row at a time, each read waited for alone).
    constexpr int kInFlight = 4;
#pragma unroll 1
    for (uint32_t row0 = tid / L::kChunks; row0 < kBlockN; row0 += kInFlight * L::kRowsPerRound) {
      uint32_t page[kInFlight];
#pragma unroll
      for (int i = 0; i < kInFlight; ++i) {
        const uint32_t row = row0 + i * L::kRowsPerRound, token = first + row;
        page[i] = ~0u;  // no key: past the block or the end (page-list entries there are not read)
        if (row < kBlockN && token < end) page[i] = pages[p.kv.page_div.divide(token)];
      }
#pragma unroll
      for (int i = 0; i < kInFlight; ++i) {
        const uint32_t row = row0 + i * L::kRowsPerRound, token = first + row;
        if (row >= kBlockN) break;
        const uint8_t* src = base;
        uint32_t bytes = 0;
        if (token < end) {
          bytes = piece_source(p, pool, base, page[i], p.kv.page_div.divide(token), token,
                               head_offset, job.batch, note, src);
        }
        ptx::cp_async_16(raw + row * Traits::kRowBytes, src, static_cast<int>(bytes));
      }
    }
    ptx::cp_async_commit();
  }

  template <int kCols, int kThreads = Traits::kGatherThreads>
  __device__ static void widen_codes(uint32_t stage, uint64_t* bar, uint32_t tid) {
    using L = CodeLayout<kCols, kThreads>;
    tid = ptx::opaque(tid);
    const uint32_t chunk = tid % L::kChunks;
    const uint32_t raw = L::raw(stage, chunk);
    // Columns 16 chunk .. + 15: panel chunk / 4, its 8-column chunks 2 (chunk % 4) and the next.
    const uint32_t out = stage + (chunk / 4) * Traits::kKVPanelBytes;
    const uint32_t out_chunk = (chunk % 4) * 2;
    // Whole rounds for every lane, so that each __syncwarp meets the full warp (rounds touch
    // distinct rows: no barrier between them). kDepth rounds at a time: their shared loads,
    // then their conversions and stores, overlap (one round's chain alone is latency-bound).
    constexpr uint32_t kDepth = 4;
#pragma unroll 1
    for (uint32_t round = 0; round < kBlockN; round += kDepth * L::kRowsPerRound) {
      uint4 codes[kDepth];
#pragma unroll
      for (uint32_t i = 0; i < kDepth; ++i) {
        const uint32_t row = round + i * L::kRowsPerRound + tid / L::kChunks;
        codes[i] = make_uint4(0u, 0u, 0u, 0u);
        if (row < kBlockN) codes[i] = ptx::ld_shared_v4(raw + row * Traits::kRowBytes);
      }
      __syncwarp();
#pragma unroll
      for (uint32_t i = 0; i < kDepth; ++i) {
        const uint32_t row = round + i * L::kRowsPerRound + tid / L::kChunks;
        const uint2 a = ptx::e4m3x4_to_16bit<Elt>(codes[i].x);
        const uint2 b = ptx::e4m3x4_to_16bit<Elt>(codes[i].y);
        const uint2 c = ptx::e4m3x4_to_16bit<Elt>(codes[i].z);
        const uint2 d = ptx::e4m3x4_to_16bit<Elt>(codes[i].w);
        const uint32_t dst = out + row * Traits::kRowBytes;
        const uint32_t swizzle = row % 8;
        if (row < kBlockN) {  // converted regardless: only the stores wait on the compare
          ptx::st_shared_v4(dst + ((out_chunk ^ swizzle) << 4), make_uint4(a.x, a.y, b.x, b.y));
          ptx::st_shared_v4(dst + (((out_chunk + 1) ^ swizzle) << 4),
                            make_uint4(c.x, c.y, d.x, d.y));
        }
      }
    }
    ptx::mbarrier_arrive(bar);
  }
};

}  // namespace hopattn::kernels::fwd
