// The MLA producer warpgroup: for each KV block of the CTA's split, the page lookups of its 64
// keys (once per key, by 64 threads, into a row table in shared memory) and then the copy of the
// 576-wide rows (512 of ckv, 64 of kpe) into a ring stage, in the 128B-swizzled panel layout the
// MMAs read. ckv is both the key (S = Q K^T over all 576 columns) and the value (O = P V over the
// first 512), so each row is read from memory once.
//
// 16-bit caches: cp.async, 16 bytes a copy; a warp covers 512 contiguous bytes of one row per
// instruction. Keys past the split's end, past kv_len, or whose page id is out of range are not
// read: cp.async with a source size of 0 writes zeros, so P = 0 meets V = 0 there (0 * NaN from a
// poisoned slot would be NaN).
//
// fp8 e4m3 caches: 16-byte loads into registers, widened exactly to q's 16-bit type
// (ptx/dequant.cuh) and stored with st.shared; the dequantization scale is applied to the
// logits and to the output instead. Rows not to be read are zeros the same way.
#pragma once

#include <cstdint>

#include "kernels/mla/tile.cuh"
#include "kernels/mla/traits.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/dequant.cuh"
#include "ptx/fence.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/named_barrier.cuh"
#include "ptx/shared_memory.cuh"

namespace hopattn::kernels::mla {

inline constexpr uint64_t kHangTimeoutNs = 20'000'000'000ull;

// A wait that has not completed in this long is a pipeline bug: trap, so the host gets a launch
// failure instead of a hung device.
__device__ __forceinline__ void wait_barrier(uint64_t* bar, uint32_t parity) {
  if (!ptx::mbarrier_wait_parity_for(bar, parity, kHangTimeoutNs)) __trap();
}

template <class Traits>
struct MlaLoader {
  // The request's physical pages in token order, and how many entries it may use.
  struct PageList {
    const int* pages;  // entry i at pages[i * p.page_col_stride]
    int count;
  };

  __device__ static PageList page_list(const MlaParams& p, int b) {
    if (p.block_table != nullptr) return {p.block_table + b * p.block_table_stride, p.max_pages};
    const int begin = p.page_indptr[b * p.page_indptr_stride];
    return {p.page_indices + begin * p.page_col_stride,
            p.page_indptr[(b + 1) * p.page_indptr_stride] - begin};
  }

  // Threads 0..63: (page, slot) of key `first + tid`, page -1 when the key is not to be read.
  // An index outside the page table or a page id outside the pool is never dereferenced.
  __device__ static void fill_row_table(const MlaParams& p, const PageList& list, int2* table,
                                        int first, int key_end, int tid) {
    if (tid >= kBlockKeys) return;
    const int key = first + tid;
    int2 e = make_int2(-1, 0);
    if (key < key_end) {
      const int index = static_cast<int>(p.page_div.divide(static_cast<uint32_t>(key)));
      if (index < list.count) {
        const int page = list.pages[index * p.page_col_stride];
        if (page >= 0 && page < p.num_pages) e = make_int2(page, key - index * p.page_size);
      }
    }
    table[tid] = e;
  }

  // 16-bit cache: the block's rows by cp.async into stage `dst` (a shared-window address), then
  // one arrival per thread on `full` once its copies have landed.
  __device__ static void copy_block(const MlaParams& p, const int2* table, uint32_t dst,
                                    uint64_t* full, uint32_t tid) {
    using Elt = typename Traits::Elt;
    const Elt* ckv = static_cast<const Elt*>(p.ckv);
    const Elt* kpe = static_cast<const Elt*>(p.kpe);
    // ckv: 64 chunks a row; a thread keeps chunk tid % 64 and walks every other row.
    const uint32_t c = tid % 64;
#pragma unroll 8
    for (uint32_t row = tid / 64; row < kBlockKeys; row += 2) {
      const int2 e = table[row];
      const Elt* src = ckv;
      int bytes = 0;
      if (e.x >= 0) {
        src = ckv + e.x * p.ckv_stride[0] + e.y * p.ckv_stride[1] + c * 8;
        bytes = 16;
      }
      ptx::cp_async_16(dst + swizzled_offset(Traits::kKVPanelBytes, row, c), src, bytes);
    }
    // kpe: 8 chunks a row (panel 8); a thread keeps chunk tid % 8 and walks every 16th row.
    const uint32_t ce = tid % 8;
#pragma unroll
    for (uint32_t row = tid / 8; row < kBlockKeys; row += 16) {
      const int2 e = table[row];
      const Elt* src = kpe;
      int bytes = 0;
      if (e.x >= 0) {
        src = kpe + e.x * p.kpe_stride[0] + e.y * p.kpe_stride[1] + ce * 8;
        bytes = 16;
      }
      ptx::cp_async_16(dst + swizzled_offset(Traits::kKVPanelBytes, row, 64 + ce), src, bytes);
    }
    ptx::cp_async_mbarrier_arrive_noinc(full);
  }

  // fp8 cache, step 1: the block's rows as 16-byte loads into registers (16 of ckv, 2 of kpe a
  // thread), issued before the wait for the stage so that their latency overlaps it. ckv: a
  // thread keeps chunk tid % 32 (of 32) and walks every 4th row; kpe: chunk tid % 4, every 32nd.
  struct Fp8Rows {
    uint4 ckv[kBlockKeys / 4];
    uint4 kpe[kBlockKeys / 32];
  };

  __device__ static uint4 load_16(const uint8_t* base, const int2& e, const int64_t (&stride)[2],
                                  uint32_t byte) {
    if (e.x < 0) return make_uint4(0, 0, 0, 0);
    return __ldg(reinterpret_cast<const uint4*>(base + e.x * stride[0] + e.y * stride[1] + byte));
  }

  __device__ static void load_fp8(const MlaParams& p, const int2* table, Fp8Rows& r, uint32_t tid) {
    const uint8_t* ckv = static_cast<const uint8_t*>(p.ckv);
    const uint8_t* kpe = static_cast<const uint8_t*>(p.kpe);
#pragma unroll
    for (int k = 0; k < kBlockKeys / 4; ++k) {
      r.ckv[k] = load_16(ckv, table[tid / 32 + 4 * k], p.ckv_stride, (tid % 32) * 16);
    }
#pragma unroll
    for (int k = 0; k < kBlockKeys / 32; ++k) {
      r.kpe[k] = load_16(kpe, table[tid / 4 + 32 * k], p.kpe_stride, (tid % 4) * 16);
    }
  }

  // fp8 cache, step 2: widen to Elt (exact) and store into the swizzled stage: 16 codes of
  // 16-byte chunk c become 16-bit chunks 2c and 2c + 1 of the row. Then the proxy fence (wgmma
  // reads what st.shared wrote) and one arrival per thread.
  __device__ static void store_chunk(uint32_t dst, uint32_t row, uint32_t chunk, const uint4& v) {
    using Elt = typename Traits::Elt;
    const uint2 a = ptx::e4m3x4_to_16bit<Elt>(v.x), b = ptx::e4m3x4_to_16bit<Elt>(v.y);
    const uint2 c = ptx::e4m3x4_to_16bit<Elt>(v.z), d = ptx::e4m3x4_to_16bit<Elt>(v.w);
    ptx::st_shared_v4(dst + swizzled_offset(Traits::kKVPanelBytes, row, 2 * chunk),
                      make_uint4(a.x, a.y, b.x, b.y));
    ptx::st_shared_v4(dst + swizzled_offset(Traits::kKVPanelBytes, row, 2 * chunk + 1),
                      make_uint4(c.x, c.y, d.x, d.y));
  }

  __device__ static void store_fp8(const Fp8Rows& r, uint32_t dst, uint64_t* full, uint32_t tid) {
#pragma unroll
    for (int k = 0; k < kBlockKeys / 4; ++k) store_chunk(dst, tid / 32 + 4 * k, tid % 32, r.ckv[k]);
#pragma unroll
    for (int k = 0; k < kBlockKeys / 32; ++k) {
      store_chunk(dst, tid / 4 + 32 * k, 32 + tid % 4, r.kpe[k]);
    }
    ptx::fence_proxy_async_shared();
    ptx::mbarrier_arrive(full);
  }

  // The producer warpgroup's whole part of a tile.
  __device__ static void run(const MlaParams& p, const SharedPlan<Traits>& sm, const Tile& t) {
    const uint32_t tid = threadIdx.x % 128;
    const PageList list = page_list(p, t.batch);
    for (int n = 0; n < t.num_blocks; ++n) {
      const uint32_t stage = n % Traits::kStages;
      const uint32_t phase = (n / Traits::kStages) & 1;
      int2* table = sm.row_table(n & 1);
      // The lookups go before the wait for the stage: their latency overlaps the consumers.
      fill_row_table(p, list, table, (t.block_begin + n) * kBlockKeys, t.key_end,
                     static_cast<int>(tid));
      ptx::named_barrier_sync(kProducer, 128);
      if constexpr (Traits::kFp8Cache) {
        Fp8Rows rows;
        load_fp8(p, table, rows, tid);
        wait_barrier(sm.empty(stage), phase ^ 1);
        store_fp8(rows, ptx::smem_address(sm.kv(stage)), sm.full(stage), tid);
      } else {
        wait_barrier(sm.empty(stage), phase ^ 1);
        copy_block(p, table, ptx::smem_address(sm.kv(stage)), sm.full(stage), tid);
      }
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();  // no copy of this thread's still in flight when it leaves
  }
};

}  // namespace hopattn::kernels::mla
