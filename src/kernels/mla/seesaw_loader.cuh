// The producer warpgroup of the seesaw schedule (seesaw.cuh): blocks of 64 keys, block n into
// buffer n % 2, each buffer loaded in two halves that free at different times. The owner of
// block n (consumer n % 2) reads its own V half last in its local P V, early in the pair; the
// other half and kpe (where the owner parks P) are read last by the other consumer's P V, late
// in the pair. So a pair's four halves are reloaded in the order they free: both owners' halves,
// then both rests. Page lookups, TMA boxes and the cp.async gather are MlaLoader's.
#pragma once

#include <cstdint>

#include "kernels/mla/loader.cuh"
#include "kernels/mla/seesaw_traits.cuh"
#include "kernels/mla/tile.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/shared_memory.cuh"

namespace hopattn::kernels::mla {

template <class Traits>
struct SeesawLoader {
  using Loader = MlaLoader<Traits>;
  static constexpr int kKeys = Traits::kBlockKeys;

  // Where one block of the pair comes from.
  struct Source {
    uint32_t table;  // its row table (shared-window address)
    int2 head;       // key 0's (page, slot)
    bool by_tma;     // the block lies in one page and all its keys exist
  };

  // Buffer b's owner half (ckv panels of consumer b's V columns) or its rest (the other
  // consumer's V columns and kpe), into full_own(b) / full_rest(b).
  template <bool kOwn>
  __device__ static void load_half(const MlaParams& p, const SeesawPlan<Traits>& sm, uint32_t b,
                                   const Source& src, uint32_t tid) {
    const uint32_t ckv0 = (kOwn ? b : 1 - b) * Traits::kHalfPanels;
    uint64_t* full = kOwn ? sm.full_own(b) : sm.full_rest(b);
    if (src.by_tma) {
      Loader::template tma_panels<Traits::kHalfPanels, !kOwn>(p, sm.kv(b), full, src.head, tid,
                                                              static_cast<int>(ckv0));
    } else {
      Loader::template copy_panels<Traits::kHalfPanels, !kOwn>(
          p, src.table, ptx::smem_address(sm.kv(b)), full, tid, ckv0);
    }
  }

  __device__ static void run(const MlaParams& p, const SeesawPlan<Traits>& sm, const Tile& t) {
    const uint32_t tid = threadIdx.x % 128;
    const typename Loader::PageList list = Loader::page_list(p, t.batch, tid);
    if (tid == 0) Loader::check_kv_len(p, list, t.batch);
    // An odd block count is padded with a block past the split's end: every key is "not to be
    // read", so the gather writes zeros (P = 0 meets V = 0) and the consumers mask it whole.
    const int pairs = (t.num_blocks + 1) / 2;
    // Both blocks of the next pair's entries in flight while a pair is copied.
    typename Loader::template PagesAhead<2> pages(p, list, t, static_cast<int>(tid));
    const int key0 = pages.key0;
    for (int k = 0; k < pairs; ++k) {
      Source src[2];
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int n = 2 * k + b;
        // take() gives the padding block (n = num_blocks) no page: its rows are zeros.
        const int page = pages.take(p, list, t, n, b, static_cast<int>(tid));
        const int2* table = Loader::publish_rows(p, sm, t, key0, n, page, tid);
        src[b].table = ptx::smem_address(table);
        src[b].head = Loader::table_entry(src[b].table, 0);
        src[b].by_tma = p.tma && src[b].head.x >= 0 && key0 + (n + 1) * kKeys <= t.key_end;
      }
      const uint32_t free_phase = (k & 1) ^ 1;  // the first pair finds the buffers free
#pragma unroll
      for (uint32_t b = 0; b < 2; ++b) {
        ptx::mbarrier_wait_or_trap(sm.empty_own(b), free_phase);
        load_half<true>(p, sm, b, src[b], tid);
      }
#pragma unroll
      for (uint32_t b = 0; b < 2; ++b) {
        ptx::mbarrier_wait_or_trap(sm.empty_rest(b), free_phase);
        load_half<false>(p, sm, b, src[b], tid);
      }
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();  // no copy of this thread's still in flight when it leaves
  }
};

}  // namespace hopattn::kernels::mla
