// Host planner of the batch family: one serving step (a few prefill chunks and many decodes over
// one paged KV cache) becomes per-CTA work lists for one persistent launch, written into a
// caller-owned host staging buffer in the layout of batch_plan_layout.hpp (the caller copies it to
// the device with one asynchronous copy; nothing here touches CUDA).
//
// Work. Each request is cut into row tiles of packed (q position, q head) rows of one KV head
// (batch_tiles.hpp): a request whose q_len * group rows fit 64 is ONE decode tile of 16, 32 or 64
// rows; a longer one is prefill tiles of floor(128 / group) whole positions. Every (tile, KV head)
// is a unit of work whose keys are clipped to the union of what its rows see (bottom-right causal,
// sliding window), so no item is ever scheduled for keys none of its rows sees.
//
// Cost model, in units of one (row, key) of a prefill tile at wgmma rate:
//   prefill tile: 128 (rows padded to the tile) per key;
//   decode tile:  max(2 * tile_rows, 150) per key: its mma.sync rows cost twice a wgmma row, but a
//                 decode tile streams its KV head's keys from HBM, and at 16-bit KV a key's K and V
//                 (4 D bytes) take as long to load as 150 rows of math on them (4 D flop a row):
//                 the H200's achieved flop per byte, ~660 TFLOP/s over ~4.4 TB/s. The issue's
//                 measured step agrees: its floor of 640 us of prefill math (822 M (row, key)
//                 pairs) and 470 us of decode reads (4.06 M (tile, key) pairs) on 132 SMs is 13.2
//                 ns per prefill tile key and 15.3 ns per decode tile key, 148 / 128;
//   every item:   + kItemOverheadCost (pipeline fill before the first KV byte, epilogue).
// Splitting. Units whose cost exceeds a cap are cut into KV chunks at multiples of kKvChunkKeys
// (absolute key indices). The cap starts at the balance of the largest item against the mean
// load and is refined by a modelled makespan that counts whole waves of the large items and the
// chunks' rounding, as the decode family's split heuristic does: a step with few units fills the
// grid (8 decodes x 8 KV heads at 8k keys: 4 chunks each, 256 items on 264 CTAs), a full step
// splits nothing.
// Assignment: longest processing time first within equal groups of CTAs. The grid is cut into
// G = gcd(num_kv_heads, num_ctas) groups of consecutive CTAs, and KV head h of every work goes to
// group h mod G: each group then receives the same costs in the same order, so one LPT schedule
// of group 0 (each item onto its least-loaded CTA; batch_schedule.cpp, assign) is every
// group's, and the groups' loads and means are equal. Plain LPT's bound holds in each group, hence
// over the grid (tested): the busiest CTA's cost <= mean CTA cost + the largest item's cost. G
// times fewer placements, and each CTA's list is written in one sequential pass.
//
// plan() allocates nothing: every scratch array is sized in the constructor from the limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hopattn/options.hpp"
#include "plan/batch_plan_layout.hpp"
#include "plan/batch_tiles.hpp"

namespace hopattn::plan {

// Whether a mixed step's decodes overlap its prefill tiles (BatchPlanLimits::spread_decodes and
// side_decodes). kAuto: where the step's decode items cost no more than its prefill items in the
// cost model below, i.e. where the decodes can stream under the prefill math (steps like the
// issue's (a): 1.16x faster with both on; decode-heavy steps like (b) run 1-2% slower with either,
// so they keep the plain order: docs/perf/batch.md). kOn: in every mixed step; kOff: never.
enum class BatchOverlap : uint8_t { kAuto, kOff, kOn };

// The side lane's time for a decode item of cost c, in the cost model's units (below): about
// kSideLaneCost * c. Swept on step (a) with side lane v2 (2026-12-06, H100, NOTES.md "Run set ab",
// two calls of two rounds): 8 1422-1439 us, 6 1390-1410, 5 1391-1397, 4 1504-1534, 3 and 2
// 1.25-1.65x slower (the side lane then holds its CTA past its prefill).
inline constexpr int64_t kSideLaneCost = 6;

// What one planner (and the buffers sized from it) serves: every step with B <= max_batch
// requests and at most max_tokens q tokens in all.
struct BatchPlanLimits {
  int max_batch = 256;
  int max_tokens = 16384;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 128;  // Dqk: 64, 128 or 256
  int head_dim_v = 0;  // Dv: 64, 128 or 256; 0 = head_dim (dv())
  int page_size = 16;  // 1..256 (the kernel's page walk; splits do not depend on it)
  bool causal = true;  // bottom-right aligned
  Window window{};     // (left, right), -1 = unbounded, same alignment
  int num_ctas = 0;    // the persistent grid: SMs x CTAs per SM
  // Each CTA's decode items spread between its prefill items by load (spread_decodes() in
  // batch_plan.cpp) instead of all after them. kAuto: in the steps that overlap_decodes() picks
  // where no partition is made (partition_decodes off, or groups of one CTA).
  BatchOverlap spread_decodes = BatchOverlap::kAuto;
  // Decode items of at most kSideMaxRows rows become kDecodeSide items, which the side-lane
  // kernel runs on two producer warps beside the CTA's prefill tiles (side_decodes() in
  // batch_plan.cpp; kernels/batch/side_lane.cuh). kAuto: in the steps that overlap_decodes()
  // picks (a partitioned step has no CTA with both kinds, so none there). Planned only where that
  // kernel exists: head dims (64, 64) and (128, 128), page sizes whose TMA boxes are whole (a
  // multiple of 8 slots in common with 128 keys); the plain kernel runs a kDecodeSide item as a
  // decode tile, so every plan is complete for both kernels.
  BatchOverlap side_decodes = BatchOverlap::kAuto;
  // The side lane's cost factor the planner assumes (>= 1; hopattn bench batch --batch-side-cost).
  int64_t side_lane_cost = kSideLaneCost;
  // A mixed step's prefill works on the first partition CTAs of each group and its decode works
  // on the rest, LPT within each part, so that both kinds run side by side for the whole step
  // (the math of one beside the other's HBM stream) instead of in the order of their costs. The
  // split minimizes the modelled time max(prefill / P, decode / min((G - P) r, G)) over the
  // group's G CTAs, r = decode_cta_rate_milli / 1000: how much faster than its share of HBM
  // (every CTA streaming) a CTA that alone streams decodes goes. kAuto: in every mixed step
  // (H100, docs/perf/batch.md: the Llama (b) 1.12x faster than LPT; since a decode tile's boxes
  // are issued by two warps, (a) 1.08x faster than the spread order and the side lane, and steps
  // of (a)'s chunks with 8..64 decodes 1.03-1.26x), unless spread_decodes or side_decodes is
  // kOn (they need both kinds on a CTA). Takes the place of spread_decodes and side_decodes (a
  // CTA without prefill items gets no side items). r = 1.5 since decode tiles are computed by
  // both consumer warpgroups (mainloop.cuh, compute_split; a decode tile on 16 CTAs 1.3x
  // faster): (a) 1215 us against 1252 at 1.25 and 1318 at 2.0, (b) within 1% of its best (2.0).
  // Before that split 1.25 was best ((a) 1252 against 1291 at 1.5). Measured on bf16 caches
  // (fp8 decode tiles are not split); on an H200 a CTA's share of HBM is larger, which points
  // lower.
  BatchOverlap partition_decodes = BatchOverlap::kAuto;
  int decode_cta_rate_milli = 1500;
  // A partitioned step's prefill CTAs of each group, fixed instead of modelled (0: the model's
  // split above; clamped to the group's CTAs - 1): to time the split itself (hopattn bench batch
  // --batch-partition-ctas).
  int partition_ctas = 0;
  // The concurrent form of a mixed step (plan(), BatchPlanInfo::concurrent): besides the plan of
  // the whole step, a second plan in the same buffer of its prefill works alone on the first
  // concurrent_ctas (or the model's count) CTAs of each group, the other CTAs' lists empty, and
  // the step's decodes as at most kMaxConcurrentDecodeRuns runs of consecutive requests of one
  // q_len, which run() hands to the decode family on a second stream at the same time. The decode
  // family streams a decode at ~2.25x a batch CTA's even share of the HBM where a batch decode
  // tile reaches 1.5x, so the same decodes need fewer SMs (docs/perf/batch.md, run set am, H100:
  // (a) 1.38x the separate launches against the single plan's 1.29-1.30x, (b) 1.15-1.19x against
  // 1.13x). Planned where the step has prefill works and decodes, the decodes have q_len <= 16 in
  // at most kMaxConcurrentDecodeRuns runs, head_dim == head_dim_v, and they make at least two
  // (request, KV head) problems for every SM left to them (the decode calls then need no split
  // and no workspace). kAuto and kOn: there; kOff: never (the plan buffer is then half the size).
  // A CUDA graph replays whatever run() captured, so run() takes the single plan while capturing.
  BatchOverlap concurrent_decodes = BatchOverlap::kAuto;
  int concurrent_rate_milli = 2250;  // r of the split's model (partition_decodes) for the form
  int concurrent_ctas = 0;  // prefill CTAs of each group, fixed instead of modelled (0: model)
  // > 0: the form's tail: its prefill works go to every CTA of each group, those past the first
  // P starting from a load of the modelled decode time (the split model's decode / stream at P)
  // times concurrent_tail_milli / 1000, LPT over all of them; run() launches the batch kernel
  // over the last CTAs' lists on the decode stream after the decodes, so the SMs the decodes
  // leave before the prefill ends take prefill work. Only where the form splits no work (no
  // merge between the two launches). 0: off (the decodes' SMs idle from their end on).
  int concurrent_tail_milli = 0;
  // The card's peak HBM bandwidth in GB/s (0: kConcurrentModelHbmGbps, the card the form's model
  // was fitted on). The decodes' cap beside the prefill is kConcurrentHbmShare of the card's
  // stream, which the model counts in CTA shares of that card's HBM, so it scales with this:
  // on an H200 (4.8 TB/s) the decodes saturate its HBM on more SMs (run set ar: (b) ran best at
  // 15-17 prefill CTAs of 33 there, 20-22 on the H100; (a) at 26 on both).
  int hbm_gbps = 0;
  // The card's L2 bytes, for the order of the prefill works (0: plain LPT): in a step without
  // decodes, or on the prefill CTAs of a partition, they go out in sections of consecutive
  // requests whose K/V (all KV heads) fits fwd_section_bytes (half the L2 under a causal
  // diagonal, as the fwd walk's sections), LPT within each section, the section holding the
  // costliest work first. Plain LPT runs tile k of every request side by side, so a step whose
  // K/V exceeds the L2 reads it from HBM again for every tile (H100, docs/perf/batch.md: 16 x
  // 1024 tokens 389 -> 303 us with sections, the fwd family's 310; (d) 8 x 2048 537 -> 492, its
  // 507). BatchAttention sets kBatchL2Bytes.
  int64_t l2_bytes = 0;

  int dv() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
};

// L2 of the Hopper parts the batch kernel runs on (H100 SXM and PCIe, H200: 50 MB).
inline constexpr int64_t kBatchL2Bytes = int64_t{50} << 20;

// ------------------------------------------------------------------------------- cost model
inline constexpr int64_t kPrefillRowKeyCost = 1;
inline constexpr int64_t kDecodeRowKeyCost = 2;
inline constexpr int64_t kDecodeKeyLoadCost = 150;
// Two 64-key decode tiles streamed (the decode family's kCtaFixedTiles): two dependent global
// round trips (lengths, page table) before the first KV byte, then the epilogue.
inline constexpr int64_t kItemOverheadCost = 2 * kDecodeKvBlock * kDecodeKeyLoadCost;

constexpr int64_t batch_key_cost(BatchTileKind kind, int tile_rows) {
  if (kind == BatchTileKind::kPrefill) return kPrefillRowKeyCost * kPrefillTileRows;
  const int64_t math = kDecodeRowKeyCost * tile_rows;
  return math > kDecodeKeyLoadCost ? math : kDecodeKeyLoadCost;
}

constexpr int64_t batch_item_cost(BatchTileKind kind, int tile_rows, int64_t keys) {
  return keys * batch_key_cost(kind, tile_rows) + kItemOverheadCost;
}

inline int64_t batch_item_cost(const BatchWorkItem& item) {
  return batch_item_cost(static_cast<BatchTileKind>(item.kind), item.tile_rows,
                         int64_t{item.kv_end} - item.kv_begin);
}

// ------------------------------------------------------------------------------- assignment
// assign(): a run of at least this many equal-cost placements takes plain LPT over the part in
// constant time each (batch_schedule.cpp, assign_run: its sort and rebuild cost about this many
// tree walks); shorter runs the part's tree.
inline constexpr int64_t kAssignRunItemsMin = 64;

// The bits that hold 0 .. n - 1: log2 of n rounded up to a power of two (assign()'s tree keys
// keep a CTA in this many low bits and its trees are this deep; write_items() keeps a work's
// placement in them).
inline int ceil_log2(int n) {
  int bits = 0;
  while ((1 << bits) < n) ++bits;
  return bits;
}

// ------------------------------------------------------------------------------- planner
// Worst cases over every step the limits admit (what the caller allocates once).
struct BatchPlanCapacity {
  int64_t max_tiles;         // (request, row tile) pairs
  int64_t max_items;         // work items
  int64_t max_merges;        // merge records (= semaphores of a last-CTA merge)
  int64_t max_partial_rows;  // rows of the partial-state buffer
  size_t plan_bytes;         // the plan buffer (host staging and its device copy)
  size_t partial_o_bytes;    // fp32 [max_partial_rows][Dv]
  size_t partial_lse_bytes;  // fp32 [max_partial_rows]
};

// Most runs of decodes the concurrent form hands to the decode family (one call each).
inline constexpr int kMaxConcurrentDecodeRuns = 4;
// The share of the card's decode stream the concurrent form's decodes get beside its prefill
// (the split model's cap; batch_plan.cpp, concurrent_partition).
inline constexpr double kConcurrentHbmShare = 0.8;
// The peak HBM bandwidth (GB/s) of the card the concurrent form's model was fitted on (H100 SXM).
inline constexpr int kConcurrentModelHbmGbps = 3350;
// The largest BatchPlanLimits::hbm_gbps taken (no card comes near it).
inline constexpr int kMaxHbmGbps = 1000000;

// Requests [begin, end) of a step, every one a decode of q_len tokens: one decode-family call.
struct BatchDecodeRun {
  int32_t begin = 0, end = 0, q_len = 0;
};

// The concurrent form of a planned step (BatchPlanLimits::concurrent_decodes); prefill_ctas 0:
// none was planned.
struct BatchConcurrentForm {
  size_t plan_offset = 0;  // the prefill plan's place in the plan buffer (16-byte aligned)
  size_t plan_end = 0;     // its end: the bytes of the buffer to copy to the device
  int prefill_ctas = 0;    // each group's CTAs with prefill items (the others' lists are empty)
  // BatchPlanLimits::concurrent_tail_milli: the other CTAs' lists hold prefill items as well, to
  // run after the decodes (a second launch over CTAs [prefill_ctas, group's CTAs) of each group).
  bool tail = false;
  int num_merges = 0;  // merge records of the prefill plan
  int num_partial_rows = 0;
  int num_runs = 0;
  BatchDecodeRun runs[kMaxConcurrentDecodeRuns];
};

// What one plan() call produced (also in the header, except the costs).
struct BatchPlanInfo {
  size_t used_bytes = 0;  // bytes written from the start of the buffer: the copy to the device
  int num_items = 0;
  int num_merges = 0;
  int num_partial_rows = 0;
  int num_splits_max = 1;       // most KV chunks of one (request, KV head, row tile)
  int64_t total_cost = 0;       // sum of the items' batch_item_cost
  int64_t max_cta_cost = 0;     // the busiest CTA
  int64_t max_item_cost = 0;    // the largest item
  bool decodes_spread = false;  // spread_decodes() ordered the lists
  int num_side_items = 0;       // kDecodeSide items (the side-lane kernel runs them)
  // partition_decodes: the CTAs of each group (of num_ctas / gcd(num_kv_heads, num_ctas)
  // consecutive ones) that run prefill works, the first ones; 0: not partitioned.
  int partition_ctas = 0;
  BatchConcurrentForm concurrent;  // used_bytes is the whole step's plan alone
};

class BatchPlanner {
 public:
  // Throws hopattn::Error when a limit is out of range (heads, head dims, page size, window,
  // grid, or a plan that would not fit 32-bit offsets).
  explicit BatchPlanner(const BatchPlanLimits& limits);

  static BatchPlanCapacity capacity(const BatchPlanLimits& limits);
  // Bytes of the plan buffer: enough for every step the limits admit.
  static size_t workspace_bytes(const BatchPlanLimits& limits) {
    return capacity(limits).plan_bytes;
  }

  // Plans a step of `batch` requests into `workspace` (host memory, 16-byte aligned, at least
  // workspace_bytes(limits()) bytes). cu_seqlens_q: int32 [batch + 1], 0 first, non-decreasing;
  // kv_lens: int32 [batch], each >= the request's q_len (kv_lens include the new tokens). Bad
  // input throws hopattn::Error saying what was expected and what was given, before anything is
  // written to `workspace`.
  BatchPlanInfo plan(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch,
                     void* workspace, size_t workspace_bytes);
  // The same from q lengths (int32 [batch], each >= 0) instead of their offsets.
  BatchPlanInfo plan_q_lens(const int32_t* q_lens, const int32_t* kv_lens, int batch,
                            void* workspace, size_t workspace_bytes);

  const BatchPlanLimits& limits() const { return limits_; }
  // BatchPlanLimits::hbm_gbps, set once the card is known (no buffer depends on it).
  void set_hbm_gbps(int gbps);
  const BatchPlanCapacity& capacity() const { return capacity_; }

 private:
  // One (request, row tile) pair: its keys are the same for every KV head. Its other fields are
  // in its unsplit work record (read_tiles() writes work i for tile i).
  struct Tile {
    int64_t key_cost;  // keys * batch_key_cost: one KV head's cost without the item overhead
    int32_t kv_begin, kv_end;
    int32_t splits;  // KV chunks (1: unsplit)
    // Split only (make_works()):
    int32_t first_work;  // its chunk 0
    // Within KV-head group 0 (batch_plan_layout.hpp): the merge record of its placement 0 (KV
    // head 0; placement p: + p) and the partial row of (placement 0, chunk 0).
    int32_t merge_base;
    int32_t partial_base;
  };
  struct Estimate;
  struct ChunkMemo;
  // Buckets of the cost sort (batch_schedule.cpp): a cost's leading one and six more bits.
  static constexpr int kCostBuckets = 64 * 64;

  BatchPlanInfo plan_impl(const int32_t* lengths, bool offsets, const int32_t* kv_lens, int batch,
                          void* workspace, size_t workspace_bytes);
  // One plan of the step at `base`; forced_partition > 0: the prefill works alone (omit_decodes_)
  // on that many CTAs of each group.
  BatchPlanInfo plan_pass(const int32_t* lengths, bool offsets, const int32_t* kv_lens, int batch,
                          unsigned char* base, int forced_partition);
  BatchPlanInfo reassign_prefills(int batch, unsigned char* base, int parts, int64_t tail_load);
  BatchPlanInfo write_plan(unsigned char* base, int batch);
  // The concurrent form's decode runs and prefill CTAs a group after the whole step's pass, or 0.
  int concurrent_partition(const int32_t* lengths, bool offsets, int batch,
                           BatchConcurrentForm& form) const;
  void check_workspace(const void* workspace, size_t bytes) const;
  int64_t read_tiles(const int32_t* lengths, bool offsets, const int32_t* kv_lens, int batch);
  int64_t choose_chunk_cost(int64_t total_key_cost, int64_t max_key_cost);
  Estimate estimate(int64_t chunk_cost, int64_t total_key_cost, int64_t max_unsplit,
                    ChunkMemo& memo) const;
  int split_count(const Tile& t, int64_t chunk_cost) const;
  void make_works(int64_t chunk_cost);
  void sort_works();
  void assign();
  void write_cta_offsets(unsigned char* dst, size_t bytes);
  int write_items(unsigned char* dst, BatchPlanInfo& info);
  void write_merges(unsigned char* dst);
  void spread_decodes(int place_bits);
  void weigh_kinds();
  int choose_partition() const;
  int modelled_split(int rate_milli, double cap, double tolerance) const;
  double modelled_decode_time(int rate_milli, double cap, int parts) const;
  double concurrent_cap() const;
  void partition_order();
  void section_prefills(int count);
  int side_decodes(int place_bits);
  bool overlap_decodes() const { return decode_cost_ <= prefill_cost_; }
  bool mixed_step() const { return prefill_works_ > 0 && prefill_works_ < num_works_; }

  BatchPlanLimits limits_;
  BatchPlanCapacity capacity_;
  int group_ = 1;

  // The current step.
  int64_t units_ = 0;  // (tile, KV head) pairs
  int64_t q_total_ = 0;
  int64_t max_key_cost_ = 0;
  int prefill_tiles_ = 0;
  int num_merges_ = 0;  // every group's
  int num_partial_rows_ = 0;
  int group_merges_ = 0;  // group 0's: every group has as many
  int group_partial_rows_ = 0;
  int splits_max_ = 1;

  // Scratch, sized from the limits in the constructor.
  std::vector<Tile> tiles_;
  int num_tiles_ = 0;
  std::vector<int32_t> split_candidates_;  // tiles that some candidate chunk cost would split
  int num_candidates_ = 0;
  // Works: the KV chunks of the tiles, in creation order; each KV head makes a work one item.
  int num_works_ = 0;
  int prefill_works_ = 0;
  int64_t max_work_cost_ = 0;
  std::vector<int64_t> work_cost_;          // each work's item cost
  std::vector<BatchWorkItem> work_items_;   // its record (KV head 0)
  std::vector<int32_t> head_partial_step_;  // and the partial rows between its KV heads
  std::vector<int32_t> order_;              // the works by decreasing cost
  std::vector<int32_t> sort_scratch_;
  std::vector<int32_t> bucket_start_;
  std::vector<uint16_t> work_bucket_;  // each work's bucket of the cost sort
  // assign()'s groups (batch_plan.hpp, the assignment): num_groups_ of group_ctas_ CTAs, each
  // work's KV heads g, g + G, ... in group g. Only group 0 is scheduled: placement p of a work
  // (p < group_heads_) stands for its KV head g + p * G in every group g, on CTA g *
  // group_ctas_ + (its CTA in group 0), at the same place in that CTA's list.
  int num_groups_ = 1;
  int group_ctas_ = 1;
  int group_heads_ = 1;
  std::vector<int32_t> place_cta_;    // group 0's CTA of each placement, in assignment order
  std::vector<int32_t> place_rank_;   // its place in its CTA's list
  std::vector<uint32_t> slot_place_;  // group 0's lists, CTA by CTA: work << bits | placement
  std::vector<uint32_t> spread_prefill_, spread_decode_;  // spread_decodes(): one CTA's items
  int partition_ = 0;          // partition_decodes: group 0's prefill CTAs (0: none)
  bool omit_decodes_ = false;  // read_tiles() makes no tile of a decode (the concurrent form)
  int64_t prefill_cost_ = 0, decode_cost_ = 0;  // the works' costs by kind (weigh_kinds)
  bool side_ok_ = false;            // side_decodes may plan (the limits admit the side lane)
  std::vector<uint8_t> side_slot_;  // side_decodes(): group 0's slots that run on the side lane
  // The winner tree of assign()'s current part of group 0 (its CTAs [part_first_, part_first_ +
  // part_ctas_)): 2 * part_leaves_ nodes, leaf part_leaves_ + i for the part's CTA i. A node is
  // one key, load << cta_bits_ | CTA: the lesser key is the lesser load, and of equal loads the
  // lower-numbered CTA, so a node is the plain minimum of its children (capacity() refuses limits
  // whose loads could overflow it).
  int cta_bits_ = 0;  // ceil(log2(group_ctas_)): a key's CTA bits
  int part_first_ = 0, part_ctas_ = 1;
  int part_bits_ = 0;           // ceil(log2(part_ctas_)), the tree's depth
  int part_leaves_ = 1;         // 1 << part_bits_
  std::vector<uint64_t> tree_;  // room for the whole group's tree
  // assign()'s runs of equal-cost items: every CTA's key, the CTAs by load, and the FIFO of
  // those a run loaded.
  std::vector<uint64_t> run_keys_;
  std::vector<uint64_t> run_sorted_;
  std::vector<uint64_t> run_fifo_;
  void build_tree(const uint64_t* keys);
  void assign_run(uint64_t step, int64_t count, int64_t& item);
  void assign_part(int first, int last, int begin, int end, int64_t& item, int loaded_from = 0,
                   int64_t initial_load = 0);
  template <int kLevels>
  void assign_range(int begin, int end, int64_t& item);
  std::vector<int64_t> cta_load_;   // group 0's CTAs
  std::vector<int32_t> cta_count_;  // items per CTA of group 0
  std::vector<int32_t> cta_first_;  // the list slot of each CTA's first item in group 0
};

}  // namespace hopattn::plan
