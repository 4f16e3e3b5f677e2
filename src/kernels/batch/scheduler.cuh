// The batch family's scheduler for the fwd kernel (kernels/fwd/kernel.cuh): CTA c = g *
// group_ctas + l walks group 0's items cta_offsets[l] .. cta_offsets[l + 1] - 1 of the plan's
// device copy (plan/batch_plan_layout.hpp), in the planner's order, as KV-head group g's copies
// (KV head + g, partial row + g groups' rows). The producer and both consumers read the same
// list, so they walk the same items with no communication, as with LptTileScheduler.
//
// An item is one fwd work tile of packed (q position, q head) rows of one KV head (the launch
// always packs GQA, with the planner's floor(128 / group) positions a tile): its first position is
// row_begin / group, and its sequence geometry (q offset, q and kv lengths) comes from the item,
// not from cu_seqlens_q / kv_lens, so the kernel reads nothing of the step but the plan and the
// page table. Decode items (16..64 rows) run as 128-row tiles whose rows past the request's end
// are neither loaded from the request nor stored.
//
// kSkipSide: the side-lane instance (side_lane.cuh): items of kind kDecodeSide run on producer
// warp 2 beside the consumers' tiles, so the producer warps 0 and 1 and the consumers walk the
// list without them. The plain instance runs every item, kDecodeSide ones as decode tiles, so a
// plan made for the side lane is still complete there.
#pragma once

#include <cstdint>

#include "kernels/batch/placement.cuh"
#include "kernels/fwd/mask.cuh"
#include "kernels/fwd/traits.cuh"
#include "kernels/fwd/work_tile.cuh"
#include "plan/batch_plan_layout.hpp"

namespace hopattn::kernels::batch {

using fwd::BatchWorkParams;
using fwd::FwdParams;
using fwd::TileInfo;
using fwd::WorkTile;

// The CTA's KV-head group g and its place l in it (batch_plan_layout.hpp), from the list it runs
// (placement.cuh: %ctaid.x, or where kPlaceable and the launch is placed, the one the CTA
// claimed; the side-lane kernel is never placed, and its tight producer keeps the plain read).
template <bool kPlaceable>
__device__ __forceinline__ int cta_group(const BatchWorkParams& b) {
  return static_cast<int>(b.group_ctas.divide(cta_list<kPlaceable>(b)));
}
template <bool kPlaceable>
__device__ __forceinline__ int cta_in_group(const BatchWorkParams& b) {
  const uint32_t c = cta_list<kPlaceable>(b);
  return static_cast<int>(c - b.group_ctas.divide(c) * b.group_ctas.divisor);
}

// The CTA's copies of a stored (group 0) item's KV head and partial row.
template <bool kPlaceable>
__device__ __forceinline__ int item_kv_head(const BatchWorkParams& b,
                                            const plan::BatchWorkItem& item) {
  return item.kv_head + cta_group<kPlaceable>(b);
}
template <bool kPlaceable>
__device__ __forceinline__ int item_partial_row(const BatchWorkParams& b,
                                                const plan::BatchWorkItem& item) {
  return plan::batch_group_partial_row(item.partial_row, b.header->group_partial_rows,
                                       cta_group<kPlaceable>(b));
}

template <bool kSkipSide>
class WorkListSchedulerT {
 public:
  // The batch family's calls may carry per-tensor or per-head KV scales (fwd/kernel.cuh,
  // tile_scales).
  static constexpr bool kKVScales = true;
  // Whether the kernel runs a side lane (fwd/kernel.cuh calls run_side_lane on producer warp 2).
  static constexpr bool kSideLane = kSkipSide;
  // Whether a launch of this instance may be placed (placement.cuh): the plain one only (the
  // concurrent form's prefill launch).
  static constexpr bool kPlaceable = !kSkipSide;

  // Thread 0 before the CTA's first barrier: the list the CTA runs (placement.cuh); after the
  // barrier, whether it has one (a placed launch's CTA on a decode SM has none and exits).
  __device__ static void take_list(const FwdParams& p) {
    if constexpr (kPlaceable) batch::take_list(p.batch);
  }
  __device__ static bool has_list(const FwdParams& p) {
    return static_cast<int>(cta_list<kPlaceable>(p.batch)) >= 0;
  }

  // `p` must outlive the scheduler (the kernel's __grid_constant__ parameters); the end of the
  // CTA's list is re-read rather than kept, for the producer's register budget.
  __device__ explicit WorkListSchedulerT(const FwdParams& p) : p_(p), index_(first_item(p.batch)) {
    skip_side();
  }

  __device__ bool valid() const {
    return index_ < p_.batch.cta_offsets[cta_in_group<kPlaceable>(p_.batch) + 1];
  }
  __device__ void advance() {
    ++index_;
    skip_side();
  }

  __device__ WorkTile tile() const {
    const plan::BatchWorkItem& item = p_.batch.items[index_];
    WorkTile w;
    w.m_block = 0;  // unused: info() places the tile by its first position
    w.head = item_kv_head<kPlaceable>(p_.batch, item);
    w.batch = item.request;
    w.kv_begin = item.kv_begin;
    w.kv_end = item.kv_end;
    w.partial_row = item_partial_row<kPlaceable>(p_.batch, item);
    return w;
  }

  // kReport: as make_tile_info's; the item's lengths were checked on the host when planned.
  template <class Traits, bool kReport = false>
  __device__ TileInfo info(const FwdParams& p, const WorkTile& w, DeviceStatus* = nullptr) const {
    const plan::BatchWorkItem& item = p_.batch.items[index_];
    TileInfo t;
    t.row_q = item.q_start;
    t.seqlen_q = item.q_len;
    t.row_k = 0;  // paged: keys are addressed through the page list
    t.seqlen_k = item.kv_len;
    t.batch_coord = 0;
    const int first_position =
        static_cast<int>(p.pack.pack_div.divide(static_cast<uint32_t>(item.row_begin)));
    fwd::set_tile_range<Traits>(p, w, first_position, t);
    return t;
  }

 private:
  __device__ void skip_side() {
    if constexpr (kSkipSide) {
      const int end = p_.batch.cta_offsets[cta_in_group<kPlaceable>(p_.batch) + 1];
      while (index_ < end && p_.batch.items[index_].kind ==
                                 static_cast<uint16_t>(plan::BatchTileKind::kDecodeSide)) {
        ++index_;
      }
    }
  }

  // The CTA's first item, or its list's end where the launch runs other CTAs' lists only.
  __device__ static int first_item(const BatchWorkParams& b) {
    const int c = cta_in_group<kPlaceable>(b);
    return b.cta_offsets[c >= b.cta_first && c < b.cta_last ? c : c + 1];
  }

  const FwdParams& p_;
  int index_;
};

using WorkListScheduler = WorkListSchedulerT<false>;

}  // namespace hopattn::kernels::batch
