// The byte layout of a batch plan: what BatchPlanner::plan() writes into the caller's host staging
// buffer, and what the batch kernel reads after the caller's one asynchronous copy of it to the
// device. Plain C++17 structs of 32- and 16-bit fields (no CUDA headers), the same on host and
// device.
//
//   offset 0                   BatchPlanHeader                        80 bytes
//   header.cta_offsets_offset  int32 cta_offsets[group_ctas + 1]      zero-padded to 16 bytes
//   header.items_offset        BatchWorkItem items[group_items]       48 bytes each
//   header.merges_offset       BatchMergeRecord merges[num_merges]    32 bytes each
//   header.used_bytes          end; plan() writes nothing past it
//
// Every offset is in bytes from the start of the buffer and a multiple of 16, so each record is
// read with 16-byte loads.
//
// KV-head groups. The persistent grid is num_groups groups of group_ctas consecutive CTAs, and
// group g runs the KV heads g, g + num_groups, ... of every work (batch_plan.hpp, the assignment):
// every group's lists are group 0's with the KV head moved. So the plan holds group 0's lists
// only, num_groups times fewer records to write and copy. CTA c = g * group_ctas + l runs
// items[cta_offsets[l]] .. items[cta_offsets[l + 1] - 1] in that order (largest first), each
// with g added to kv_head, g * group_partial_rows to partial_row and g * (num_merges /
// num_groups) to merge (the two where >= 0). The merge records are written for every group
// (record g * num_merges / num_groups + j is group g's copy of group 0's record j), so that the
// merge pass strides over them plainly.
//
// Outputs. An item with partial_row < 0 writes its rows straight to out / lse. Otherwise its
// (request, KV head, rows) are split over several items by KV range: each writes its rows' partial
// state (an fp32 O row of Dv values and an fp32 LSE per row: BatchPlanner::capacity sizes that
// buffer) to a block of tile_rows rows starting at partial_row (row r of the item at partial_row +
// r - row_begin; a tile may store its padding rows too), and merge record `merge` combines the
// blocks into out / lse. No two items share a partial row, so the buffer needs no clearing between
// steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>

#include "kernels/common/host_device.hpp"
#include "plan/batch_tiles.hpp"

namespace hopattn::plan {

inline constexpr uint32_t kBatchPlanMagic = 0x31504248;  // "HBP1" in little-endian bytes
inline constexpr uint32_t kBatchPlanVersion = 2;
inline constexpr uint32_t kBatchPlanAlign = 16;

struct BatchPlanHeader {
  uint32_t magic;       // kBatchPlanMagic: a kernel reading stale or foreign bytes can tell
  uint32_t version;     // kBatchPlanVersion
  uint32_t used_bytes;  // bytes from offset 0 to the end of the merge records
  int32_t num_ctas;     // persistent grid the plan is made for
  int32_t num_requests;
  int32_t total_q;  // q tokens of the step (cu_seqlens_q[B])
  int32_t
      group;  // Hq / Hkv: packed row r is q position r / group, q head kv_head * group + r % group
  int32_t num_kv_heads;
  int32_t num_items;         // of every group: what the grid runs (group_items are stored)
  int32_t num_merges;        // also the semaphores a last-CTA merge needs (one per record)
  int32_t num_partial_rows;  // rows of the partial-state buffer this step uses (every group's)
  uint32_t cta_offsets_offset;
  uint32_t items_offset;
  uint32_t merges_offset;
  int32_t num_prefill_items;  // of every group
  int32_t num_decode_items;
  int32_t num_groups;          // KV-head groups of the grid (gcd(num_kv_heads, num_ctas))
  int32_t group_ctas;          // CTAs a group: num_ctas / num_groups; cta_offsets has one more
  int32_t group_items;         // records stored: group 0's items, num_items / num_groups
  int32_t group_partial_rows;  // partial rows a group: num_partial_rows / num_groups
};

struct BatchWorkItem {
  int32_t request;  // index into the step's requests (page-table row)
  int32_t kv_head;
  int32_t q_start;  // cu_seqlens_q[request]: the q / out / lse row of the request's position 0
  int32_t q_len;    // the request's q tokens
  int32_t kv_len;   // its keys (cached + new): position i is aligned with key i + kv_len - q_len
  // Packed rows [row_begin, row_end) of (request, kv_head); both multiples of the group (whole
  // positions); row_end - row_begin <= tile_rows.
  int32_t row_begin;
  int32_t row_end;
  // Keys [kv_begin, kv_end): clipped to the keys some row of the item sees (causal, window), and a
  // chunk of them when split (interior bounds multiples of kKvChunkKeys). Empty only when no row
  // of the item sees any key: the item then writes out = 0, lse = -inf (or empty partials).
  int32_t kv_begin;
  int32_t kv_end;
  uint16_t kind;        // BatchTileKind
  uint16_t tile_rows;   // 128 (prefill) or 16 / 32 / 64 (decode)
  int32_t partial_row;  // < 0: rows land in out / lse; else first row of its partial-state block
  int32_t merge;        // < 0: not split; else the merge record of its rows
};

// One split (request, KV head, rows): merge the partial blocks of splits 0 .. num_splits - 1 (in
// that order, which is ascending KV order) into out / lse. Split k's row r (row_begin <= r <
// row_end) is partial row partial_row + k * partial_stride + (r - row_begin); it lands in q / out
// row q_start + r / group, q head kv_head * group + r % group.
struct BatchMergeRecord {
  int32_t request;
  int32_t kv_head;
  int32_t q_start;
  int32_t row_begin;
  int32_t row_end;
  int32_t partial_row;
  int32_t partial_stride;  // the items' tile_rows
  int32_t num_splits;      // 2 .. kMaxSplits
};

static_assert(sizeof(BatchPlanHeader) == 80 && alignof(BatchPlanHeader) == 4, "header: 80 bytes");
static_assert(sizeof(BatchWorkItem) == 48, "work item: three 16-byte loads");
static_assert(offsetof(BatchWorkItem, kv_begin) == 28 && offsetof(BatchWorkItem, kind) == 36 &&
                  offsetof(BatchWorkItem, partial_row) == 40 &&
                  offsetof(BatchWorkItem, merge) == 44,
              "work item byte offsets (the planner patches partial_row and merge as one pair)");
static_assert(sizeof(BatchMergeRecord) == 32, "merge record: two 16-byte loads");
static_assert(sizeof(BatchPlanHeader) % kBatchPlanAlign == 0, "the CTA offsets start aligned");

HOPATTN_HOST_DEVICE constexpr size_t batch_plan_align(size_t bytes) {
  return (bytes + kBatchPlanAlign - 1) / kBatchPlanAlign * kBatchPlanAlign;
}

// Group g's copy of group 0's partial row `row` (< 0: the item is not split).
HOPATTN_HOST_DEVICE constexpr int32_t batch_group_partial_row(int32_t row,
                                                              int32_t group_partial_rows, int g) {
  return row < 0 ? row : row + g * group_partial_rows;
}

// Group g's copy of a stored item: what CTA g * group_ctas + l runs for group 0's item of CTA l.
HOPATTN_HOST_DEVICE BatchWorkItem batch_group_item(BatchWorkItem item, const BatchPlanHeader& h,
                                                   int g) {
  item.kv_head += g;
  item.partial_row = batch_group_partial_row(item.partial_row, h.group_partial_rows, g);
  if (item.merge >= 0) item.merge += g * (h.num_merges / h.num_groups);
  return item;
}

// The KV-head groups of a grid of `num_ctas` CTAs over `num_kv_heads` KV heads (the header's
// num_groups; host code: the planner, the launch).
inline int batch_plan_groups(int num_kv_heads, int num_ctas) {
  return std::gcd(num_kv_heads, num_ctas);
}

// Where the arrays of a plan lie whose groups have `group_ctas` CTAs, with `group_items` stored
// items (group 0's) and `num_merges` merges.
struct BatchPlanOffsets {
  size_t cta_offsets;
  size_t items;
  size_t merges;
  size_t end;
};

HOPATTN_HOST_DEVICE constexpr BatchPlanOffsets batch_plan_offsets(int64_t group_ctas,
                                                                  int64_t group_items,
                                                                  int64_t num_merges) {
  BatchPlanOffsets o{};
  o.cta_offsets = sizeof(BatchPlanHeader);
  o.items = o.cta_offsets + batch_plan_align(sizeof(int32_t) * static_cast<size_t>(group_ctas + 1));
  o.merges = o.items + sizeof(BatchWorkItem) * static_cast<size_t>(group_items);
  o.end = o.merges + sizeof(BatchMergeRecord) * static_cast<size_t>(num_merges);
  return o;
}

}  // namespace hopattn::plan
