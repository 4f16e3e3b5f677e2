// The MLA producer warpgroup: for each KV block of the CTA's split, the page lookups of its 64
// keys (once per key, by 64 threads, into a row table in shared memory) and then the copy of the
// 576-wide rows (512 of ckv, 64 of kpe) into a ring stage, in the 128B-swizzled panel layout the
// MMAs read. ckv is both the key (S = Q K^T over all 576 columns) and the value (O = P V over the
// first 512), so each row is read from memory once.
//
// 16-bit caches: a block that lies in one page with every key present (page sizes that are
// multiples of the block) arrives by TMA, one box per 64-column panel; other blocks (small
// pages, the split's last block, a bad page id) by cp.async, 16 bytes a copy. Keys past the split's
// end, past kv_len, or whose page id is out of range are not read: cp.async with a source size of 0
// writes zeros, so P = 0 meets V = 0 there (0 * NaN from a poisoned slot would be NaN).
//
// fp8 e4m3 caches: the codes by cp.async into a ring of raw blocks, ahead of their widening; then
// read back into registers, widened exactly to the MMAs' 16-bit type (Traits::MmaElt: q's, or
// fp16 in the narrow schedule; ptx/dequant.cuh) and stored with st.shared, by this warpgroup or
// (the narrow schedule, run_fp8_raw) by the consumer warpgroups; the dequantization scale is
// applied to the logits and to the output instead. Rows not to be read are zeros the same way.
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/common/device_status.cuh"
#include "kernels/mla/tile.cuh"
#include "kernels/mla/traits.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/dequant.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/tma.cuh"

namespace hopattn::kernels::mla {

template <class Traits>
struct MlaLoader {
  static constexpr int kBlockKeys = Traits::kBlockKeys;
  // The request's physical pages in token order, and how many entries it may use.
  struct PageList {
    const int* pages;  // entry i at pages[i * p.page_col_stride]
    int count;
  };

  // CSR offsets outside page_indices (or decreasing) leave the request no pages (recorded).
  __device__ static PageList page_list(const MlaParams& p, int b, uint32_t tid) {
    if (p.block_table != nullptr) return {p.block_table + b * p.block_table_stride, p.max_pages};
    const int begin = p.page_indptr[b * p.page_indptr_stride];
    const int end = p.page_indptr[(b + 1) * p.page_indptr_stride];
    const bool end_ok = in_closed_range(end, p.num_indices);
    if (!end_ok || !in_closed_range(begin, end)) {  // together: 0 <= begin <= end <= size
      if (tid == 0) {
        record_violation(p.status, status_tag(StatusFamily::kMla, StatusIndex::kPageIndptr), b,
                         end_ok ? b : b + 1, end_ok ? begin : end, p.num_indices);
      }
      return {p.page_indices, 0};
    }
    return {p.page_indices + begin * p.page_col_stride, end - begin};
  }

  // A kv_len beyond the tokens of the request's page list: its keys past the list are read as
  // zeros (fetch_page); recorded once.
  __device__ static void check_kv_len(const MlaParams& p, const PageList& list, int b) {
    const int64_t len = p.kv_lens[b * p.kv_lens_stride];
    const int64_t cap = int64_t{list.count} * p.page_size;
    if (!in_closed_range(len, cap)) {
      record_violation(p.status, status_tag(StatusFamily::kMla, StatusIndex::kKvLen), b, -1, len,
                       cap);
    }
  }

  // fetch_page's "no key here" (a page-table entry is any int, -1 included).
  static constexpr int kNoKey = INT_MIN;

  // Threads 0..kBlockKeys-1, key `first + tid` of a block: its page-table entry is fetched one
  // block ahead (fetch_page), so that the global load's latency overlaps the previous block's
  // copies; row_entry then makes the table entry, (page, slot), or page -1 for a key not to be
  // read. An index outside the page table or a page id outside the pool is never dereferenced
  // (the latter is recorded).
  __device__ static int fetch_page(const MlaParams& p, const PageList& list, int first, int key_end,
                                   int tid) {
    const int key = first + tid;
    if (tid >= kBlockKeys || key >= key_end) return kNoKey;
    const int index = static_cast<int>(p.page_div.divide(static_cast<uint32_t>(key)));
    return index < list.count ? list.pages[index * p.page_col_stride] : kNoKey;
  }

  // The page-table entries of the next kAhead blocks (each thread its key's), in flight together:
  // the loop over a split's blocks runs kAhead blocks an unrolled pass (for_blocks), so that
  // entry j always sits in the same register. Block b's entry is taken kAhead blocks after its
  // load was issued. One block ahead left the load's latency exposed whenever the ring was not
  // full: the fp8 raw ring's producer (copies only) then waited one L2 round trip a block.
  template <int kAhead>
  struct PagesAhead {
    int page[kAhead];
    int key0;  // the split's first key

    __device__ PagesAhead(const MlaParams& p, const PageList& list, const Tile& t, int tid)
        : key0(t.block_begin * kBlockKeys) {
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        page[j] =
            j < t.num_blocks ? fetch_page(p, list, key0 + j * kBlockKeys, t.key_end, tid) : kNoKey;
      }
    }
    // Block b = (a multiple of kAhead) + j: its entry, and block b + kAhead's load issued.
    __device__ int take(const MlaParams& p, const PageList& list, const Tile& t, int b, int j,
                        int tid) {
      const int entry = page[j];
      const int next = b + kAhead;
      page[j] = next < t.num_blocks ? fetch_page(p, list, key0 + next * kBlockKeys, t.key_end, tid)
                                    : kNoKey;
      return entry;
    }
  };

  // body(b, j) for b = 0 .. num_blocks - 1, j = b % kAhead a compile-time index after unrolling.
  template <int kAhead, class Body>
  __device__ static void for_blocks(int num_blocks, Body&& body) {
    for (int b0 = 0; b0 < num_blocks; b0 += kAhead) {
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        if (b0 + j < num_blocks) body(b0 + j, j);
      }
    }
  }

  __device__ static void write_row_entry(const MlaParams& p, int2* table, int first, int page,
                                         int request, int tid) {
    if (tid >= kBlockKeys) return;
    const int key = first + tid;
    const int index = static_cast<int>(p.page_div.divide(static_cast<uint32_t>(key)));
    const bool ok = static_cast<uint32_t>(page) < static_cast<uint32_t>(p.num_pages);
    if (!ok && page != kNoKey) {
      record_violation(p.status, status_tag(StatusFamily::kMla, StatusIndex::kPage), request, index,
                       page, p.num_pages);
    }
    table[tid] = ok ? make_int2(page, key - index * p.page_size) : make_int2(-1, 0);
  }

  // Lane mapping of both copy paths: 8 lanes a row, 16 rows a pass over the 128 threads, so
  // that a thread looks its row up once (one ld.shared of the row table) and then issues its
  // copies at fixed offsets from one address: lane j of a row takes 16-byte chunks j, j + 8, ...
  // and the 8 lanes of a row cover 128 contiguous bytes per instruction.
  static constexpr uint32_t kLanesPerRow = 8;
  static constexpr uint32_t kRowsPerPass = 128 / kLanesPerRow;
  static_assert(kBlockKeys % kRowsPerPass == 0, "whole passes");

  // (page, slot) of row `row` of the table at shared address `table`, by an explicit ld.shared
  // (a generic load would go through L1TEX and stall each copy on its latency).
  __device__ static int2 table_entry(uint32_t table, uint32_t row) {
    const uint2 v = ptx::ld_shared_v2(table + row * 8);
    return make_int2(static_cast<int>(v.x), static_cast<int>(v.y));
  }

  template <class T>
  __device__ static const T* row_pointer(const void* base, const int2& e,
                                         const int64_t (&stride)[2]) {
    return static_cast<const T*>(base) + e.x * stride[0] + e.y * stride[1];
  }

  // 16-bit cache: panels [ckv0, ckv0 + kCkvPanels) of ckv (and kpe's panel with kWithKpe) of the
  // block's rows by cp.async into stage `dst` (a shared-window address), then one arrival per
  // thread on `full` once its copies have landed.
  template <int kCkvPanels, bool kWithKpe>
  __device__ static void copy_panels(const MlaParams& p, uint32_t table, uint32_t dst,
                                     uint64_t* full, uint32_t tid, uint32_t ckv0) {
    using Elt = typename Traits::Elt;
    const uint32_t lane = tid % kLanesPerRow;
#pragma unroll
    for (uint32_t row = tid / kLanesPerRow; row < kBlockKeys; row += kRowsPerPass) {
      const int2 e = table_entry(table, row);
      const bool read = e.x >= 0;
      const Elt* ckv =
          read ? row_pointer<Elt>(p.ckv, e, p.ckv_stride) : static_cast<const Elt*>(p.ckv);
      const Elt* kpe =
          read ? row_pointer<Elt>(p.kpe, e, p.kpe_stride) : static_cast<const Elt*>(p.kpe);
      const int bytes = read ? 16 : 0;
      const uint32_t d = dst + row * 128 + ((lane ^ (row % 8)) << 4);
#pragma unroll
      for (uint32_t k = 0; k < kCkvPanels; ++k) {
        const uint32_t i = ckv0 + k;
        ptx::cp_async_16(d + i * Traits::kKVPanelStride, ckv + (read ? (lane + 8 * i) * 8 : 0),
                         bytes);
      }
      if constexpr (kWithKpe) {
        ptx::cp_async_16(d + Traits::kLatentPanels * Traits::kKVPanelStride,
                         kpe + (read ? lane * 8 : 0), bytes);
      }
    }
    ptx::cp_async_mbarrier_arrive_noinc(full);
  }

  __device__ static void copy_block(const MlaParams& p, uint32_t table, uint32_t dst,
                                    uint64_t* full, uint32_t tid) {
    copy_panels<Traits::kLatentPanels, true>(p, table, dst, full, tid, 0);
  }

  // 16-bit cache, a block within one page whose keys all exist (page_size % kBlockKeys == 0):
  // one thread raises the stage's byte count and issues one box per panel (of ckv panels
  // [ckv0, ckv0 + kCkvPanels), and kpe's with kWithKpe) at (column, slot, page); the other
  // threads' arrivals complete the count of 128 like the copy path's. The phase completes only
  // once the boxes' bytes have landed.
  template <int kCkvPanels, bool kWithKpe>
  __device__ static void tma_panels(const MlaParams& p, uint8_t* dst, uint64_t* full, int2 first,
                                    uint32_t tid, int ckv0) {
    if (tid == 0) {
      ptx::mbarrier_arrive_expect_tx(full,
                                     (kCkvPanels + (kWithKpe ? 1 : 0)) * Traits::kKVPanelBytes);
#pragma unroll
      for (int k = 0; k < kCkvPanels; ++k) {
        const int i = ckv0 + k;
        ptx::tma_load_3d(dst + i * Traits::kKVPanelStride, &p.tm_ckv, full, i * Traits::kPanelCols,
                         first.y, first.x);
      }
      if constexpr (kWithKpe) {
        ptx::tma_load_3d(dst + Traits::kLatentPanels * Traits::kKVPanelStride, &p.tm_kpe, full, 0,
                         first.y, first.x);
      }
    } else {
      ptx::mbarrier_arrive(full);
    }
  }

  __device__ static void tma_block(const MlaParams& p, uint8_t* dst, uint64_t* full, int2 first,
                                   uint32_t tid) {
    tma_panels<Traits::kLatentPanels, true>(p, dst, full, first, tid, 0);
  }

  // fp8 cache, step 1: the block's codes by cp.async into a raw slot (row r at r * 576 bytes),
  // kFp8Ahead blocks before their widening, so that the DRAM latency of a block's loads overlaps
  // the widening of the blocks before it without holding registers. Each thread copies and later
  // reads back the same chunks (lane j of a row's 8: ckv chunks j, j + 8, j + 16, j + 24 and, for
  // j < 4, kpe chunk j at raw chunk 32 + j), so its own cp.async.wait_group orders the two. A row
  // not to be read is zero-filled (a source size of 0).
  static constexpr int kFp8Rows = kBlockKeys / kRowsPerPass;
  static constexpr int kFp8Ahead = Traits::kRawSlots;
  struct Fp8Rows {
    uint4 ckv[kFp8Rows][4];
    uint4 kpe[kFp8Rows];
  };

  __device__ static uint32_t raw_chunk(uint32_t raw, uint32_t tid, int k) {
    const uint32_t row = tid / kLanesPerRow + k * kRowsPerPass;
    return raw + row * Traits::kRawRowBytes + (tid % kLanesPerRow) * 16;
  }

  __device__ static void copy_fp8(const MlaParams& p, uint32_t table, uint32_t raw, uint32_t tid) {
    const uint32_t lane = tid % kLanesPerRow;
#pragma unroll
    for (int k = 0; k < kFp8Rows; ++k) {
      const int2 e = table_entry(table, tid / kLanesPerRow + k * kRowsPerPass);
      const bool read = e.x >= 0;
      const uint8_t* ckv =
          read ? row_pointer<uint8_t>(p.ckv, e, p.ckv_stride) : static_cast<const uint8_t*>(p.ckv);
      const uint8_t* kpe =
          read ? row_pointer<uint8_t>(p.kpe, e, p.kpe_stride) : static_cast<const uint8_t*>(p.kpe);
      const int bytes = read ? 16 : 0;
      const uint32_t d = raw_chunk(raw, tid, k);
#pragma unroll
      for (uint32_t i = 0; i < 4; ++i) {
        ptx::cp_async_16(d + i * 128, ckv + (read ? (lane + 8 * i) * 16 : 0), bytes);
      }
      if (lane < 4) ptx::cp_async_16(d + 512, kpe + (read ? lane * 16 : 0), bytes);
    }
  }

  // fp8 cache, step 2, once this thread's copies of the block have landed: its codes from the raw
  // slot into registers.
  __device__ static void read_fp8(uint32_t raw, Fp8Rows& r, uint32_t tid) {
    const uint32_t lane = tid % kLanesPerRow;
#pragma unroll
    for (int k = 0; k < kFp8Rows; ++k) {
      const uint32_t s = raw_chunk(raw, tid, k);
#pragma unroll
      for (uint32_t i = 0; i < 4; ++i) r.ckv[k][i] = ptx::ld_shared_v4(s + i * 128);
      r.kpe[k] = lane < 4 ? ptx::ld_shared_v4(s + 512) : make_uint4(0, 0, 0, 0);
    }
  }

  // fp8 cache, step 3: widen to Elt (exact) and store into the swizzled stage: the 16 codes of
  // fp8 chunk c become 16-bit chunks 2c and 2c + 1 of the row. Then the proxy fence (wgmma reads
  // what st.shared wrote) and one arrival per thread.
  __device__ static void store_chunk(uint32_t dst, uint32_t row, uint32_t chunk, const uint4& v) {
    using Elt = typename Traits::MmaElt;
    const uint2 a = ptx::e4m3x4_to_16bit<Elt>(v.x), b = ptx::e4m3x4_to_16bit<Elt>(v.y);
    const uint2 c = ptx::e4m3x4_to_16bit<Elt>(v.z), d = ptx::e4m3x4_to_16bit<Elt>(v.w);
    ptx::st_shared_v4(dst + swizzled_offset(Traits::kKVPanelStride, row, 2 * chunk),
                      make_uint4(a.x, a.y, b.x, b.y));
    ptx::st_shared_v4(dst + swizzled_offset(Traits::kKVPanelStride, row, 2 * chunk + 1),
                      make_uint4(c.x, c.y, d.x, d.y));
  }

  // The stores of step 3 alone (a consumer that widens fences and syncs its warpgroup itself).
  __device__ static void widen_fp8(const Fp8Rows& r, uint32_t dst, uint32_t tid) {
    const uint32_t lane = tid % kLanesPerRow;
#pragma unroll
    for (int k = 0; k < kFp8Rows; ++k) {
      const uint32_t row = tid / kLanesPerRow + k * kRowsPerPass;
#pragma unroll
      for (int i = 0; i < 4; ++i) store_chunk(dst, row, lane + 8 * i, r.ckv[k][i]);
      if (lane < 4) store_chunk(dst, row, 32 + lane, r.kpe[k]);
    }
  }

  __device__ static void store_fp8(const Fp8Rows& r, uint32_t dst, uint64_t* full, uint32_t tid) {
    widen_fp8(r, dst, tid);
    ptx::fence_proxy_async_shared();
    ptx::mbarrier_arrive(full);
  }

  // fp8 cache, a ring of raw codes (Traits::kRawRing, the narrow schedule): the producer only
  // brings the codes, block b into raw slot b % kRawSlots by cp.async, and each slot has a full
  // barrier (one cp.async arrival per producer thread: it completes once every copy has landed)
  // and an empty one (the consumer that read the block). The consumers build their MMAs' A
  // operands from the codes in registers (narrow.cuh): the widening that bounded the fp8 rows on
  // one warpgroup runs on the two consumer warpgroups, and no widened copy takes shared memory.
  __device__ static uint64_t* raw_full(const SharedPlan<Traits>& sm, int slot) {
    return sm.full(0) + Traits::kRawFullBarrier + slot;
  }
  __device__ static uint64_t* raw_empty(const SharedPlan<Traits>& sm, int slot) {
    return sm.full(0) + Traits::kRawEmptyBarrier + slot;
  }

  // The raw ring's producer only issues copies, so its blocks follow each other as fast as their
  // page-table entries arrive: they are loaded kRawPagesAhead blocks ahead.
  static constexpr int kRawPagesAhead = 2;
  __device__ static void run_fp8_raw(const MlaParams& p, const SharedPlan<Traits>& sm,
                                     const Tile& t, const PageList& list, uint32_t tid) {
    PagesAhead<kRawPagesAhead> pages(p, list, t, static_cast<int>(tid));
    for_blocks<kRawPagesAhead>(t.num_blocks, [&](int b, int j) {
      const int slot = b % Traits::kRawSlots;
      const int2* table =
          publish_rows(p, sm, t, pages.key0, b, pages.take(p, list, t, b, j, tid), tid);
      ptx::mbarrier_wait_or_trap(raw_empty(sm, slot), ((b / Traits::kRawSlots) & 1) ^ 1);
      copy_fp8(p, ptx::smem_address(table), ptx::smem_address(sm.raw(slot)), tid);
      ptx::cp_async_mbarrier_arrive_noinc(raw_full(sm, slot));
    });
  }

  // fp8 cache: the producer's loop. Block b's row table is written and its copies issued kFp8Ahead
  // blocks before its widening (the prologue issues the first kFp8Ahead); every step commits one
  // cp.async group (empty past the last block), so waiting for all but the newest kFp8Ahead - 1
  // groups means block n's codes have landed. The slot of block n takes block n + kFp8Ahead only
  // after block n's codes were widened (their registers consumed: no read of the slot is still
  // pending when the copy overwrites it).
  // Block b's row table (Plan::kRowTables of them, used in turn) from `page`, its thread's key's
  // page-table entry (PagesAhead::take): written, then the producer warpgroup's barrier.
  template <class Plan>
  __device__ static const int2* publish_rows(const MlaParams& p, const Plan& sm, const Tile& t,
                                             int key0, int b, int page, uint32_t tid) {
    int2* table = sm.row_table(b % Plan::kRowTables);
    write_row_entry(p, table, key0 + b * kBlockKeys, page, t.batch, static_cast<int>(tid));
    ptx::named_barrier_sync(kProducer, 128);
    return table;
  }

  __device__ static void run_fp8(const MlaParams& p, const SharedPlan<Traits>& sm, const Tile& t,
                                 const PageList& list, uint32_t tid) {
    PagesAhead<1> pages(p, list, t, static_cast<int>(tid));
    // Block b's table (double-buffered: block b - 2's copies were issued a barrier ago) and copies.
    auto issue = [&](int b) {
      if (b < t.num_blocks) {
        const int2* table =
            publish_rows(p, sm, t, pages.key0, b, pages.take(p, list, t, b, 0, tid), tid);
        copy_fp8(p, ptx::smem_address(table), ptx::smem_address(sm.raw(b % kFp8Ahead)), tid);
      }
      ptx::cp_async_commit();
    };
#pragma unroll
    for (int b = 0; b < kFp8Ahead; ++b) issue(b);
    for (int n = 0; n < t.num_blocks; ++n) {
      const uint32_t stage = n % Traits::kStages;
      const uint32_t phase = (n / Traits::kStages) & 1;
      ptx::cp_async_wait<kFp8Ahead - 1>();
      Fp8Rows rows;
      read_fp8(ptx::smem_address(sm.raw(n % kFp8Ahead)), rows, tid);
      ptx::mbarrier_wait_or_trap(sm.empty(stage), phase ^ 1);
      store_fp8(rows, ptx::smem_address(sm.kv(stage)), sm.full(stage), tid);
      issue(n + kFp8Ahead);
    }
  }

  // The producer warpgroup's whole part of a tile.
  __device__ static void run(const MlaParams& p, const SharedPlan<Traits>& sm, const Tile& t) {
    const uint32_t tid = threadIdx.x % 128;
    const PageList list = page_list(p, t.batch, tid);
    if (tid == 0) check_kv_len(p, list, t.batch);
    if constexpr (Traits::kRawRing) {
      run_fp8_raw(p, sm, t, list, tid);
    } else if constexpr (Traits::kFp8Cache) {
      run_fp8(p, sm, t, list, tid);
    } else {
      PagesAhead<1> pages(p, list, t, static_cast<int>(tid));
      for (int n = 0; n < t.num_blocks; ++n) {
        const uint32_t stage = n % Traits::kStages;
        const uint32_t phase = (n / Traits::kStages) & 1;
        const int2* table =
            publish_rows(p, sm, t, pages.key0, n, pages.take(p, list, t, n, 0, tid), tid);
        const int first = pages.key0 + n * kBlockKeys;
        const uint32_t table_addr = ptx::smem_address(table);
        // The whole block in one page, every key present: key 0's entry names the page.
        const int2 head = table_entry(table_addr, 0);
        const bool by_tma = p.tma && head.x >= 0 && first + kBlockKeys <= t.key_end;
        ptx::mbarrier_wait_or_trap(sm.empty(stage), phase ^ 1);
        if (by_tma) {
          tma_block(p, sm.kv(stage), sm.full(stage), head, tid);
        } else {
          copy_block(p, table_addr, ptx::smem_address(sm.kv(stage)), sm.full(stage), tid);
        }
      }
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();  // no copy of this thread's still in flight when it leaves
  }
};

}  // namespace hopattn::kernels::mla
