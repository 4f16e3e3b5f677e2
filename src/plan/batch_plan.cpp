// The checking and writing half of BatchPlanner (batch_plan.hpp): limits and capacity, the
// step's validation and its row tiles, and the plan's bytes; batch_schedule.cpp splits, orders
// and assigns the work in between.
#include "plan/batch_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>

#include "hopattn/error.hpp"
#include "plan/decode_plan.hpp"

namespace hopattn::plan {

using detail::concat;

namespace {

// Four int32 lanes (GCC / Clang vector extension): write_items() moves records 16 bytes at a time.
typedef int32_t v4si __attribute__((vector_size(16)));
static_assert(sizeof(BatchWorkItem) == 3 * sizeof(v4si), "a work record is three 16-byte words");
// The lanes read_tiles() fills and write_record() patches: word 0 {request, kv_head, q_start,
// q_len}, word 1 {kv_len, row_begin, row_end, kv_begin}, word 2 {kv_end, kind | tile_rows << 16,
// partial_row, merge}.
static_assert(offsetof(BatchWorkItem, kv_head) == 4 && offsetof(BatchWorkItem, q_len) == 12 &&
                  offsetof(BatchWorkItem, kv_len) == 16 &&
                  offsetof(BatchWorkItem, kv_begin) == 28 &&
                  offsetof(BatchWorkItem, kv_end) == 32 && offsetof(BatchWorkItem, kind) == 36 &&
                  offsetof(BatchWorkItem, tile_rows) == 38 &&
                  offsetof(BatchWorkItem, partial_row) == 40 &&
                  offsetof(BatchWorkItem, merge) == 44,
              "a work record's three 16-byte words");

constexpr const char* kWhere = "hopattn.BatchAttention";
constexpr const char* kPlanWhere = "hopattn.BatchAttention.plan";

std::string arg_at(const char* where, const char* arg) { return concat(where, ": ", arg); }
std::string arg_at(const char* where, const char* arg, int64_t i) {
  return concat(where, ": ", arg, "[", i, "]");
}

// The library's one message form ("<where>: expected <what>, got <what>"). Callers test their
// condition first, so that a valid call (plan() runs every step) builds no text at all.
template <class Expected, class Given>
[[noreturn]] void fail(ErrorKind kind, const std::string& where, const Expected& expected,
                       const Given& given) {
  check(false, kind, where, expected, given);
  std::abort();  // unreachable: check(false, ...) throws
}

bool is_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

// A split model's knobs (modelled_split): its decode CTA rate r in thousandths, and a fixed count
// of prefill CTAs a group in its place (0: modelled).
void check_split_knobs(const char* rate_name, int rate_milli, const char* ctas_name, int ctas) {
  if (rate_milli < 1000 || rate_milli > 64000) {
    fail(ErrorKind::kValue, arg_at(kWhere, rate_name), "1000..64000", rate_milli);
  }
  if (ctas < 0 || ctas > (1 << 16)) {
    fail(ErrorKind::kValue, arg_at(kWhere, ctas_name), "0..65536 (0: modelled)", ctas);
  }
}

// BatchPlanLimits::hbm_gbps: 0 (the model's card) or a bandwidth a card can have.
void check_hbm_gbps(int gbps) {
  if (gbps < 0 || gbps > kMaxHbmGbps) {
    fail(ErrorKind::kValue, arg_at(kWhere, "hbm_gbps"),
         concat("0..", kMaxHbmGbps, " (0: the model's card)"), gbps);
  }
}

void validate_limits(const BatchPlanLimits& l) {
  if (l.max_batch < 1) fail(ErrorKind::kValue, arg_at(kWhere, "max_batch"), ">= 1", l.max_batch);
  if (l.max_tokens < 1) {
    fail(ErrorKind::kValue, arg_at(kWhere, "max_tokens"), ">= 1", l.max_tokens);
  }
  if (l.num_qo_heads < 1) {
    fail(ErrorKind::kValue, arg_at(kWhere, "num_qo_heads"), ">= 1", l.num_qo_heads);
  }
  if (l.num_kv_heads < 1 || l.num_qo_heads % l.num_kv_heads != 0) {
    fail(ErrorKind::kValue, arg_at(kWhere, "num_kv_heads"),
         concat("a KV head count >= 1 that divides num_qo_heads = ", l.num_qo_heads),
         l.num_kv_heads);
  }
  const int group = l.num_qo_heads / l.num_kv_heads;
  if (group > kMaxGroup) {
    fail(ErrorKind::kNotImplemented, arg_at(kWhere, "num_qo_heads"),
         concat("at most ", kMaxGroup, " q heads per KV head"),
         concat(l.num_qo_heads, " / ", l.num_kv_heads, " = ", group));
  }
  if (!is_head_dim(l.head_dim)) {
    fail(ErrorKind::kNotImplemented, arg_at(kWhere, "head_dim"), "64, 128 or 256", l.head_dim);
  }
  if (l.head_dim_v != 0 && !is_head_dim(l.head_dim_v)) {
    fail(ErrorKind::kNotImplemented, arg_at(kWhere, "head_dim_v"),
         "64, 128 or 256 (or 0: head_dim)", l.head_dim_v);
  }
  if (l.page_size < 1 || l.page_size > 256) {
    fail(ErrorKind::kValue, arg_at(kWhere, "page_size"), "1..256", l.page_size);
  }
  if (l.window.left < -1 || l.window.right < -1) {
    fail(ErrorKind::kValue, arg_at(kWhere, "window"), "left and right >= -1 (-1 = unbounded)",
         concat("(", l.window.left, ", ", l.window.right, ")"));
  }
  // Packed rows (q position x group) and item counts are int32 in the plan.
  if (int64_t{l.max_tokens} * group > std::numeric_limits<int32_t>::max()) {
    fail(ErrorKind::kValue, arg_at(kWhere, "max_tokens"),
         concat("max_tokens * (num_qo_heads / num_kv_heads) < 2^31 packed rows"),
         concat(l.max_tokens, " * ", group));
  }
  if (l.num_ctas < 1 || l.num_ctas > (1 << 16)) {
    fail(ErrorKind::kValue, arg_at(kWhere, "num_ctas"), "1..65536 (SMs x CTAs per SM)", l.num_ctas);
  }
  check_split_knobs("decode_cta_rate_milli", l.decode_cta_rate_milli, "partition_ctas",
                    l.partition_ctas);
  check_split_knobs("concurrent_rate_milli", l.concurrent_rate_milli, "concurrent_ctas",
                    l.concurrent_ctas);
  if (l.concurrent_tail_milli < 0 || l.concurrent_tail_milli > 64000) {
    fail(ErrorKind::kValue, arg_at(kWhere, "concurrent_tail_milli"), "0..64000 (0: off)",
         l.concurrent_tail_milli);
  }
  if (l.side_lane_cost < 1 || l.side_lane_cost > 1024) {
    fail(ErrorKind::kValue, arg_at(kWhere, "side_lane_cost"), "1..1024", l.side_lane_cost);
  }
  check_hbm_gbps(l.hbm_gbps);
}

// The keys query position p (of q_len, against kv_len keys) sees: [lo, hi). Bottom-right aligned
// (DESIGN.md): p sees its diagonal key p + kv_len - q_len, so with kv_len >= q_len the range is
// never empty, and both ends are non-decreasing in p. Hence the keys a run of positions p0..p1 sees
// are exactly [lo(p0), hi(p1)). Each end is the diagonal plus an offset, clipped to the keys: an
// unbounded side's offset is too far out to bind (keys and positions are int32), so neither end
// branches on the mask.
struct Visibility {
  static constexpr int64_t kUnbounded = int64_t{1} << 40;
  int64_t before, after;  // keys seen before and after the diagonal
  Visibility(bool causal, const Window& w)
      : before(w.left >= 0 ? w.left : kUnbounded),
        after(w.right >= 0 ? (causal ? std::min(w.right, 0) : w.right)
                           : (causal ? 0 : kUnbounded)) {}
  int64_t lo(int64_t diag) const { return std::max<int64_t>(0, diag - before); }
  int64_t hi(int64_t diag, int64_t kv_len) const { return std::min(kv_len, diag + after + 1); }
};

}  // namespace

// ----------------------------------------------------------------------------- capacity

BatchPlanCapacity BatchPlanner::capacity(const BatchPlanLimits& l) {
  validate_limits(l);
  const int64_t group = l.num_qo_heads / l.num_kv_heads;
  const int64_t ctas = l.num_ctas;
  BatchPlanCapacity c{};
  // A decode request is one tile; a prefill request of q positions is ceil(q / ppt) <=
  // 1 + floor(q / ppt) tiles; and only requests with q tokens have tiles.
  c.max_tiles = std::min<int64_t>(l.max_batch, l.max_tokens) +
                l.max_tokens / prefill_positions_per_tile(static_cast<int>(group));
  // Splitting makes fewer than ctas split units (one merge record each) and fewer than 2 * ctas
  // pieces in all (each at most a prefill tile of partial rows): choose_chunk_cost takes only
  // caps that estimate() finds within these. A split replaces its unit's item by its pieces.
  if (static_cast<double>(c.max_tiles) * l.num_kv_heads + 2.0 * ctas >
      std::numeric_limits<int32_t>::max()) {
    fail(ErrorKind::kValue, arg_at(kWhere, "max_tokens"),
         "limits whose work items number below 2^31",
         concat(c.max_tiles, " tiles x ", l.num_kv_heads, " KV heads"));
  }
  c.max_items = c.max_tiles * l.num_kv_heads + 2 * ctas;
  // assign()'s keys hold a CTA's load above its number (batch_plan.hpp, tree_): under LPT a
  // CTA's load is at most the mean plus the largest item, which must fit the key's other bits.
  {
    const int bits = ceil_log2(l.num_ctas);
    const double largest =
        static_cast<double>(std::numeric_limits<int32_t>::max()) *
            static_cast<double>(std::max({kDecodeKeyLoadCost, kDecodeRowKeyCost * kDecodeMaxRows,
                                          kPrefillRowKeyCost * kPrefillTileRows})) +
        static_cast<double>(kItemOverheadCost);
    const double busiest =
        static_cast<double>(c.max_items) * largest / static_cast<double>(ctas) + largest;
    if (busiest >= std::ldexp(1.0, 63 - bits)) {
      fail(ErrorKind::kValue, arg_at(kWhere, "max_tokens"),
           "limits whose CTA loads fit the planner's 64-bit keys (fewer than about 15 million "
           "work items)",
           concat(c.max_items, " work items over ", l.num_ctas, " CTAs"));
    }
  }
  c.max_merges = ctas;
  c.max_partial_rows = 2 * ctas * kPrefillTileRows;
  // The plan stores one KV-head group's items (batch_plan_layout.hpp): every group has as many.
  const int groups = batch_plan_groups(l.num_kv_heads, l.num_ctas);
  c.plan_bytes = batch_plan_offsets(ctas / groups, c.max_items / groups, c.max_merges).end;
  // The concurrent form's prefill plan follows the whole step's, 16-byte aligned.
  if (l.concurrent_decodes != BatchOverlap::kOff) {
    c.plan_bytes = ((c.plan_bytes + 15) & ~size_t{15}) + c.plan_bytes;
  }
  c.partial_o_bytes = static_cast<size_t>(c.max_partial_rows) * l.dv() * sizeof(float);
  c.partial_lse_bytes = static_cast<size_t>(c.max_partial_rows) * sizeof(float);
  if (c.plan_bytes > std::numeric_limits<uint32_t>::max()) {
    fail(ErrorKind::kValue, arg_at(kWhere, "max_tokens"),
         "limits whose plan fits 32-bit offsets (4 GiB)",
         concat(c.plan_bytes, " bytes for max_batch ", l.max_batch, ", max_tokens ", l.max_tokens));
  }
  return c;
}

BatchPlanner::BatchPlanner(const BatchPlanLimits& limits)
    : limits_(limits), capacity_(capacity(limits)) {
  group_ = limits_.num_qo_heads / limits_.num_kv_heads;
  const size_t ctas = static_cast<size_t>(limits_.num_ctas);
  const size_t max_works = static_cast<size_t>(capacity_.max_tiles) + 2 * ctas;
  tiles_.resize(static_cast<size_t>(capacity_.max_tiles));
  split_candidates_.resize(tiles_.size());
  work_cost_.resize(max_works);
  order_.resize(max_works);
  sort_scratch_.resize(max_works);
  bucket_start_.resize(kCostBuckets + 1);
  work_bucket_.resize(max_works);
  work_items_.resize(max_works);
  head_partial_step_.resize(max_works);
  num_groups_ = batch_plan_groups(limits_.num_kv_heads, limits_.num_ctas);
  group_ctas_ = limits_.num_ctas / num_groups_;
  group_heads_ = limits_.num_kv_heads / num_groups_;
  const size_t placements = static_cast<size_t>(capacity_.max_items / num_groups_);
  place_cta_.resize(placements);
  place_rank_.resize(placements);
  slot_place_.resize(placements);
  if (limits_.spread_decodes != BatchOverlap::kOff) {
    spread_prefill_.resize(placements);
    spread_decode_.resize(placements);
  }
  side_ok_ = limits_.side_decodes != BatchOverlap::kOff && limits_.head_dim == limits_.dv() &&
             limits_.head_dim <= kSideMaxHeadDim &&
             std::gcd(limits_.page_size, kPrefillKvBlock) % 8 == 0;
  if (side_ok_) side_slot_.resize(placements);
  cta_bits_ = ceil_log2(group_ctas_);
  tree_.resize(2 * (size_t{1} << cta_bits_));
  const size_t group = static_cast<size_t>(group_ctas_);
  run_keys_.resize(group);
  run_sorted_.resize(group);
  run_fifo_.resize(group);
  cta_load_.resize(group);
  cta_count_.resize(group);
  cta_first_.resize(group);
}

// ----------------------------------------------------------------------------- plan

BatchPlanInfo BatchPlanner::plan(const int32_t* cu_seqlens_q, const int32_t* kv_lens, int batch,
                                 void* workspace, size_t workspace_bytes) {
  return plan_impl(cu_seqlens_q, true, kv_lens, batch, workspace, workspace_bytes);
}

BatchPlanInfo BatchPlanner::plan_q_lens(const int32_t* q_lens, const int32_t* kv_lens, int batch,
                                        void* workspace, size_t workspace_bytes) {
  return plan_impl(q_lens, false, kv_lens, batch, workspace, workspace_bytes);
}

void BatchPlanner::check_workspace(const void* workspace, size_t bytes) const {
  if (workspace == nullptr) {
    fail(ErrorKind::kValue, arg_at(kPlanWhere, "workspace"), "a host buffer", "null");
  }
  if (reinterpret_cast<uintptr_t>(workspace) % kBatchPlanAlign != 0) {
    fail(ErrorKind::kValue, arg_at(kPlanWhere, "workspace"),
         concat("a ", kBatchPlanAlign, "-byte aligned buffer"), workspace);
  }
  if (bytes < capacity_.plan_bytes) {
    fail(ErrorKind::kValue, arg_at(kPlanWhere, "workspace"),
         concat("at least ", capacity_.plan_bytes, " bytes (BatchPlanner::workspace_bytes)"),
         concat(bytes, " bytes"));
  }
}

namespace {

// Request b broke a rule of read_tiles() (whose requests before b all passed): the rules one by
// one in their order, so that the message names the first one broken.
[[noreturn, gnu::cold, gnu::noinline]] void fail_request(const int32_t* lengths, bool offsets,
                                                         const int32_t* kv_lens, int b,
                                                         int64_t q_start, int max_tokens) {
  const char* len_arg = offsets ? "cu_seqlens_q" : "q_lens";
  int64_t q_len;
  if (offsets) {
    if (lengths[b + 1] < lengths[b]) {
      fail(ErrorKind::kValue, arg_at(kPlanWhere, len_arg, b + 1),
           concat(">= ", len_arg, "[", b, "] = ", lengths[b], " (non-decreasing offsets)"),
           lengths[b + 1]);
    }
    q_len = int64_t{lengths[b + 1]} - lengths[b];
  } else {
    if (lengths[b] < 0) {
      fail(ErrorKind::kValue, arg_at(kPlanWhere, len_arg, b), ">= 0", lengths[b]);
    }
    q_len = lengths[b];
  }
  const int64_t q_end = q_start + q_len;
  if (q_end > max_tokens) {
    if (offsets) {
      fail(ErrorKind::kValue, arg_at(kPlanWhere, len_arg, b + 1),
           concat("<= max_tokens = ", max_tokens, " q tokens (the planner's limit)"), q_end);
    }
    fail(ErrorKind::kValue, arg_at(kPlanWhere, len_arg),
         concat("a total <= max_tokens = ", max_tokens, " q tokens (the planner's limit)"),
         concat(q_end, " by ", len_arg, "[", b, "]"));
  }
  const int64_t kv_len = kv_lens[b];
  fail(ErrorKind::kValue, arg_at(kPlanWhere, "kv_lens", b),
       concat(">= q_len = ", q_len, " (kv_lens include the new tokens)"), kv_len);
}

}  // namespace

// Validates the step and cuts it into tiles; returns the total key cost over all units.
int64_t BatchPlanner::read_tiles(const int32_t* lengths, bool offsets, const int32_t* kv_lens,
                                 int batch) {
  const char* len_arg = offsets ? "cu_seqlens_q" : "q_lens";
  if (batch < 0 || batch > limits_.max_batch) {
    fail(ErrorKind::kValue, arg_at(kPlanWhere, "batch"),
         concat("0..max_batch = ", limits_.max_batch, " requests (the planner's limit)"), batch);
  }
  if ((batch > 0 || offsets) && lengths == nullptr) {
    fail(ErrorKind::kValue, arg_at(kPlanWhere, len_arg),
         concat("int32 [", offsets ? batch + 1 : batch, "]"), "null");
  }
  if (batch > 0 && kv_lens == nullptr) {
    fail(ErrorKind::kValue, arg_at(kPlanWhere, "kv_lens"), concat("int32 [", batch, "]"), "null");
  }
  if (offsets && lengths[0] != 0) {
    fail(ErrorKind::kValue, arg_at(kPlanWhere, len_arg, 0), "0", lengths[0]);
  }
  const Visibility vis(limits_.causal, limits_.window);
  const int ppt = prefill_positions_per_tile(group_);
  int64_t q_start = 0, total = 0, max_key_cost = 0;
  int prefill_tiles = 0;
  // Locals, so that the stores below are not taken to alias the planner's members.
  Tile* const tiles = tiles_.data();
  BatchWorkItem* const records = work_items_.data();
  int64_t* const costs = work_cost_.data();
  int32_t* const partial_steps = head_partial_step_.data();
  const int group = group_;
  const int64_t max_tokens = limits_.max_tokens;
  int n = 0;
  for (int b = 0; b < batch; ++b) {
    const int64_t q_len = offsets ? int64_t{lengths[b + 1]} - lengths[b] : lengths[b];
    const int64_t q_end = q_start + q_len;
    const int64_t kv_len = kv_lens[b];
    // Every rule on request b in one test (| rather than ||: one branch, not three).
    if ((q_len < 0) | (q_end > max_tokens) | (kv_len < q_len)) {
      fail_request(lengths, offsets, kv_lens, b, q_start, limits_.max_tokens);
    }
    const int decode_rows = decode_tile_rows(q_len * group);
    if (decode_rows > 0 && omit_decodes_) {  // the concurrent form's prefill plan
      q_start = q_end;
      continue;
    }
    const int64_t positions = decode_rows > 0 ? q_len : ppt;
    const auto kind = decode_rows > 0 ? BatchTileKind::kDecode : BatchTileKind::kPrefill;
    const int tile_rows = decode_rows > 0 ? decode_rows : kPrefillTileRows;
    const int64_t key_cost = batch_key_cost(kind, tile_rows);
    const int prefill = decode_rows > 0 ? 0 : 1;
    // Work n: tile n whole, what a step that splits nothing keeps (make_works()), built as three
    // 16-byte words (write_record's layout) and stored whole: the request's fields once, each
    // tile's rows and keys into them.
    const v4si head = {b, 0, static_cast<int32_t>(q_start), static_cast<int32_t>(q_len)};
    const int32_t kind_rows =
        static_cast<int32_t>(static_cast<uint32_t>(kind) | static_cast<uint32_t>(tile_rows) << 16);
    for (int64_t p0 = 0; p0 < q_len; p0 += positions, ++n) {
      const int64_t p1 = std::min(q_len, p0 + positions);
      const int64_t lo = vis.lo(p0 + kv_len - q_len);
      const int64_t hi = std::max(lo, vis.hi(p1 - 1 + kv_len - q_len, kv_len));
      const int64_t tile_cost = (hi - lo) * key_cost;
      Tile& t = tiles[n];
      t.key_cost = tile_cost;
      t.kv_begin = static_cast<int32_t>(lo);
      t.kv_end = static_cast<int32_t>(hi);
      t.splits = 1;
      const v4si middle = {static_cast<int32_t>(kv_len), static_cast<int32_t>(p0 * group),
                           static_cast<int32_t>(p1 * group), static_cast<int32_t>(lo)};
      const v4si last = {static_cast<int32_t>(hi), kind_rows, -1, -1};
      unsigned char* const record = reinterpret_cast<unsigned char*>(records + n);
      std::memcpy(record, &head, sizeof(v4si));
      std::memcpy(record + sizeof(v4si), &middle, sizeof(v4si));
      std::memcpy(record + 2 * sizeof(v4si), &last, sizeof(v4si));
      costs[n] = tile_cost + kItemOverheadCost;
      partial_steps[n] = 0;
      prefill_tiles += prefill;
      total += tile_cost;
      max_key_cost = std::max(max_key_cost, tile_cost);
    }
    q_start = q_end;
  }
  num_tiles_ = n;
  units_ = int64_t{num_tiles_} * limits_.num_kv_heads;
  q_total_ = q_start;
  max_key_cost_ = max_key_cost;
  prefill_tiles_ = prefill_tiles;
  return total * limits_.num_kv_heads;
}

// ----------------------------------------------------------------------------- writing

BatchPlanInfo BatchPlanner::plan_impl(const int32_t* lengths, bool offsets, const int32_t* kv_lens,
                                      int batch, void* workspace, size_t workspace_bytes) {
  check_workspace(workspace, workspace_bytes);
  auto* const base = static_cast<unsigned char*>(workspace);
  BatchPlanInfo info = plan_pass(lengths, offsets, kv_lens, batch, base, 0);
  BatchConcurrentForm form;
  const int parts = concurrent_partition(lengths, offsets, batch, form);
  if (parts > 0) {
    form.plan_offset = (info.used_bytes + 15) & ~size_t{15};
    BatchPlanInfo second;
    if (partition_ > 0 && num_merges_ == 0) {
      // The tail: the decodes' CTAs start from the modelled decode time (in CTA loads: a work's
      // cost counts once a KV head of the group).
      int64_t tail_load = 0;
      if (limits_.concurrent_tail_milli > 0) {
        const double decode =
            modelled_decode_time(limits_.concurrent_rate_milli, concurrent_cap(), parts) *
            group_heads_ * limits_.concurrent_tail_milli / 1000.0;
        tail_load = std::max<int64_t>(1, static_cast<int64_t>(decode));
      }
      second = reassign_prefills(batch, base + form.plan_offset, parts, tail_load);
      form.tail = tail_load > 0;
    } else {
      omit_decodes_ = true;
      second = plan_pass(lengths, offsets, kv_lens, batch, base + form.plan_offset, parts);
      omit_decodes_ = false;
    }
    form.prefill_ctas = parts;
    form.num_merges = second.num_merges;
    form.num_partial_rows = second.num_partial_rows;
    form.plan_end = form.plan_offset + second.used_bytes;
    info.concurrent = form;
  }
  return info;
}

void BatchPlanner::set_hbm_gbps(int gbps) {
  check_hbm_gbps(gbps);
  limits_.hbm_gbps = gbps;
}

// The concurrent form's cap on the decodes' stream (modelled_split) in CTA shares of the HBM of
// the card the model was fitted on: kConcurrentHbmShare of this card's stream.
double BatchPlanner::concurrent_cap() const {
  const int gbps = limits_.hbm_gbps != 0 ? limits_.hbm_gbps : kConcurrentModelHbmGbps;
  return kConcurrentHbmShare * gbps / kConcurrentModelHbmGbps;
}

// The whole step's pass has run (prefill_cost_, decode_cost_, partition_): where the concurrent
// form applies (batch_plan.hpp, concurrent_decodes), the step's decode runs into `form` and the
// prefill CTAs of each group: the split model (modelled_split) at concurrent_rate_milli, of
// equally modelled splits (within 1%) the one with the most prefill CTAs (beside an HBM the
// decodes saturate, a prefill CTA runs slower than the model says: run set am's (b)). Beside the
// prefill the decodes get kConcurrentHbmShare of the card's decode rate (concurrent_cap): run set
// am's (b) ran best at 20-22 prefill CTAs of 33 on the H100 (the cap at 1.0 of it gives 18: 1.5-3%
// slower), (a) at 25-26 (not capped there); run set ar's H200, (b) at 15-17 (the scaled cap: 16).
int BatchPlanner::concurrent_partition(const int32_t* lengths, bool offsets, int batch,
                                       BatchConcurrentForm& form) const {
  if (limits_.concurrent_decodes == BatchOverlap::kOff || !mixed_step() || group_ctas_ < 2 ||
      limits_.dv() != limits_.head_dim) {
    return 0;
  }
  int runs = 0;
  int64_t decodes = 0;
  for (int b = 0; b < batch; ++b) {
    const int64_t q_len = offsets ? int64_t{lengths[b + 1]} - lengths[b] : lengths[b];
    if (q_len == 0 || decode_tile_rows(q_len * group_) == 0) continue;
    if (q_len > kDecodeMaxQLen) return 0;
    BatchDecodeRun* last = runs > 0 ? &form.runs[runs - 1] : nullptr;
    if (last != nullptr && last->end == b && last->q_len == q_len) {
      last->end = b + 1;
    } else {
      if (runs == kMaxConcurrentDecodeRuns) return 0;
      form.runs[runs++] = {b, b + 1, static_cast<int32_t>(q_len)};
    }
    ++decodes;
  }
  const int best = limits_.concurrent_ctas > 0
                       ? std::min(limits_.concurrent_ctas, group_ctas_ - 1)
                       : modelled_split(limits_.concurrent_rate_milli, concurrent_cap(), 0.01);
  // Two (request, KV head) problems an SM left to the decodes: no split, no workspace.
  const int64_t decode_ctas = int64_t{group_ctas_ - best} * num_groups_;
  if (decodes * limits_.num_kv_heads < 2 * decode_ctas) return 0;
  form.num_runs = runs;
  return best;
}

// One pass of the planner over the step into `base` (plan_impl: the whole step, then the
// concurrent form's prefill plan).
BatchPlanInfo BatchPlanner::plan_pass(const int32_t* lengths, bool offsets, const int32_t* kv_lens,
                                      int batch, unsigned char* base, int forced_partition) {
  const int64_t total_key_cost = read_tiles(lengths, offsets, kv_lens, batch);
  make_works(choose_chunk_cost(total_key_cost, max_key_cost_));
  const int64_t num_items = int64_t{num_works_} * limits_.num_kv_heads;
  // The bounds of capacity() hold by construction; a violation would be a planner bug, and must
  // not become a write past the caller's buffer.
  if (num_items > capacity_.max_items || num_merges_ > capacity_.max_merges ||
      num_partial_rows_ > capacity_.max_partial_rows) {
    fail(ErrorKind::kRuntime, arg_at(kPlanWhere, "internal"),
         concat("at most ", capacity_.max_items, " items, ", capacity_.max_merges, " merges, ",
                capacity_.max_partial_rows, " partial rows"),
         concat(num_items, ", ", num_merges_, ", ", num_partial_rows_));
  }
  sort_works();
  weigh_kinds();
  // partition_decodes: mixed steps only, and a group of at least two CTAs to split.
  partition_ = 0;
  const bool mixed = mixed_step();
  // kAuto partitions every mixed step unless the spread order or the side lane is asked for (they
  // need both kinds on a CTA).
  const bool overlap_asked =
      limits_.spread_decodes == BatchOverlap::kOn || limits_.side_decodes == BatchOverlap::kOn;
  const bool partition = limits_.partition_decodes == BatchOverlap::kOn ||
                         (limits_.partition_decodes == BatchOverlap::kAuto && !overlap_asked);
  if (forced_partition > 0) {
    partition_ = forced_partition;
    partition_order();
  } else if (partition && mixed && group_ctas_ >= 2) {
    partition_ = choose_partition();
    partition_order();
  }
  if (limits_.l2_bytes > 0 && (partition_ > 0 || !mixed)) section_prefills(prefill_works_);
  assign();
  return write_plan(base, batch);
}

// The concurrent form's prefill plan from the whole step's pass, where that pass partitioned the
// step and split nothing: its prefill works, in the order (and L2 sections) it gave them, onto the
// first `parts` CTAs of each group. A fresh pass would read, sort and section them again (~40%
// of its time on the (a)) to the same works.
BatchPlanInfo BatchPlanner::reassign_prefills(int batch, unsigned char* base, int parts,
                                              int64_t tail_load) {
  const int all = num_works_;
  num_works_ = prefill_works_;
  partition_ = parts;
  if (tail_load > 0) {  // every CTA of the group, the decodes' from tail_load (the form's tail)
    std::fill(cta_count_.begin(), cta_count_.end(), 0);
    int64_t item = 0;
    assign_part(0, group_ctas_, 0, prefill_works_, item, parts, tail_load);
  } else {
    assign();
  }
  const BatchPlanInfo info = write_plan(base, batch);
  num_works_ = all;
  return info;
}

// The plan of the works order_[0, num_works_) as assign() placed them, at `base`.
BatchPlanInfo BatchPlanner::write_plan(unsigned char* base, int batch) {
  const int64_t num_items = int64_t{num_works_} * limits_.num_kv_heads;
  const int group_items = num_works_ * group_heads_;
  const BatchPlanOffsets off = batch_plan_offsets(group_ctas_, group_items, num_merges_);
  write_cta_offsets(base + off.cta_offsets, off.items - off.cta_offsets);
  BatchPlanInfo info;
  const int prefill_items = write_items(base + off.items, info);
  write_merges(base + off.merges);

  BatchPlanHeader h;
  h.magic = kBatchPlanMagic;
  h.version = kBatchPlanVersion;
  h.used_bytes = static_cast<uint32_t>(off.end);
  h.num_ctas = limits_.num_ctas;
  h.num_requests = batch;
  h.total_q = static_cast<int32_t>(q_total_);
  h.group = group_;
  h.num_kv_heads = limits_.num_kv_heads;
  h.num_items = static_cast<int32_t>(num_items);
  h.num_merges = num_merges_;
  h.num_partial_rows = num_partial_rows_;
  h.cta_offsets_offset = static_cast<uint32_t>(off.cta_offsets);
  h.items_offset = static_cast<uint32_t>(off.items);
  h.merges_offset = static_cast<uint32_t>(off.merges);
  h.num_prefill_items = prefill_items;
  h.num_decode_items = static_cast<int32_t>(num_items) - prefill_items;
  h.num_groups = num_groups_;
  h.group_ctas = group_ctas_;
  h.group_items = group_items;
  h.group_partial_rows = group_partial_rows_;
  std::memcpy(base, &h, sizeof(h));

  info.used_bytes = off.end;
  info.num_items = static_cast<int>(num_items);
  info.num_merges = num_merges_;
  info.num_partial_rows = num_partial_rows_;
  info.num_splits_max = splits_max_;
  // Every group's loads are group 0's.
  for (int c = 0; c < group_ctas_; ++c) {
    const int64_t load = cta_load_[static_cast<size_t>(c)];
    info.total_cost += load * num_groups_;
    info.max_cta_cost = std::max(info.max_cta_cost, load);
  }
  return info;
}

// The running sums of group 0's item counts per CTA (every group's lists are group 0's,
// batch_plan_layout.hpp), then zeros up to the items.
void BatchPlanner::write_cta_offsets(unsigned char* dst, size_t bytes) {
  int32_t running = 0;
  int32_t* const offsets = reinterpret_cast<int32_t*>(dst);
  for (int c = 0; c < group_ctas_; ++c) {
    cta_first_[static_cast<size_t>(c)] = running;
    std::memcpy(offsets + c, &running, sizeof(int32_t));
    running += cta_count_[static_cast<size_t>(c)];
  }
  std::memcpy(offsets + group_ctas_, &running, sizeof(int32_t));
  const size_t written = sizeof(int32_t) * (static_cast<size_t>(group_ctas_) + 1);
  std::memset(dst + written, 0, bytes - written);
}

namespace {

// Work i's record at `dst` for placement p (KV head p * groups): p * groups added to kv_head (0 in
// the record) and, if split, p partial blocks to partial_row and p to merge; side_step 1 marks a
// side-lane item (kDecode + 1 = kDecodeSide, the low half of the third word's second lane). The
// record moves as three 16-byte words with the fields added in registers, each word stored whole:
// a copy through a stack record patched by 4-byte stores was slower (its reload waits on store
// forwarding).
// kSplits false: the plan splits nothing (no partial row or merge to add).
template <bool kSplits = true>
inline void write_record(unsigned char* dst, const BatchWorkItem* records,
                         const int32_t* partial_steps, int32_t i, int32_t p, int32_t groups,
                         int32_t side_step) {
  const unsigned char* const from = reinterpret_cast<const unsigned char*>(records + i);
  v4si first, middle, last;
  std::memcpy(&first, from, sizeof(v4si));
  std::memcpy(&middle, from + sizeof(v4si), sizeof(v4si));
  std::memcpy(&last, from + 2 * sizeof(v4si), sizeof(v4si));
  first += v4si{0, p * groups, 0, 0};
  if constexpr (kSplits) {
    const int32_t merge_step = records[i].merge >= 0 ? 1 : 0;
    last += v4si{0, side_step, p * partial_steps[i], p * merge_step};
  } else {
    last += v4si{0, side_step, 0, 0};
  }
  std::memcpy(dst, &first, sizeof(v4si));
  std::memcpy(dst + sizeof(v4si), &middle, sizeof(v4si));
  std::memcpy(dst + 2 * sizeof(v4si), &last, sizeof(v4si));
}

}  // namespace

// Group 0's lists, CTA by CTA, in assignment order (largest first): each placement's record
// (make_works built them) with the placement's KV head set, at its slot (its CTA's first slot plus
// its rank). Where the lists are reordered first (spread_decodes) or marked (side_decodes), the
// slots' (work, placement) words are made first and the records then copied front to back. Returns
// the prefill items of every group.
int BatchPlanner::write_items(unsigned char* dst, BatchPlanInfo& info) {
  info.max_item_cost = max_work_cost_;
  const bool mixed = mixed_step();
  const bool overlap = mixed && overlap_decodes();
  const auto wanted = [&](BatchOverlap s) {
    return s == BatchOverlap::kOn ? mixed : s == BatchOverlap::kAuto && overlap;
  };
  info.partition_ctas = partition_;
  info.decodes_spread = partition_ == 0 && wanted(limits_.spread_decodes);
  // A partition keeps the kinds on CTAs of their own, so no CTA has prefill items for a decode
  // to run beside: the side lane takes nothing.
  const bool side = side_ok_ && partition_ == 0 && wanted(limits_.side_decodes);
  // Locals, so that the stores to the plan are not taken to alias them.
  const int per_work = group_heads_;
  const int num_works = num_works_;
  const int groups = num_groups_;
  const int32_t* const order = order_.data();
  const int32_t* const place_cta = place_cta_.data();
  const int32_t* const place_rank = place_rank_.data();
  const int32_t* const cta_first = cta_first_.data();
  const BatchWorkItem* const records = work_items_.data();
  const int32_t* const partial_steps = head_partial_step_.data();
  // f(work, placement, slot) for every placement in assignment order; its slot is its CTA's
  // first plus its rank there.
  const auto each_placement = [&](auto&& f) {
    for (int i = 0, n = 0; i < num_works; ++i) {
      const int32_t w = order[i];
      for (int p = 0; p < per_work; ++p, ++n) f(w, p, cta_first[place_cta[n]] + place_rank[n]);
    }
  };
  if (!info.decodes_spread && !side) {
    // Each record straight to its slot: one pass, no slot words.
    const auto place_all = [&](auto splits) {
      each_placement([&](int32_t w, int32_t p, int32_t slot) {
        write_record<decltype(splits)::value>(
            dst + sizeof(BatchWorkItem) * static_cast<size_t>(slot), records, partial_steps, w, p,
            groups, 0);
      });
    };
    if (num_merges_ > 0) {
      place_all(std::true_type{});
    } else {
      place_all(std::false_type{});
    }
    info.num_side_items = 0;
    return prefill_works_ * limits_.num_kv_heads;
  }
  // Each slot's work and placement in one word (work << place_bits | placement): one scattered
  // store a placement. It fits 32 bits: work < items / heads and 2^place_bits < 2 heads.
  const int place_bits = ceil_log2(per_work);
  const uint32_t place_mask = (uint32_t{1} << place_bits) - 1;
  const int group_items = num_works * per_work;
  uint32_t* const words = slot_place_.data();
  each_placement([&](int32_t w, int32_t p, int32_t slot) {
    words[slot] = static_cast<uint32_t>(w) << place_bits | static_cast<uint32_t>(p);
  });
  if (info.decodes_spread) spread_decodes(place_bits);
  const int side_slots_taken = side ? side_decodes(place_bits) : 0;
  info.num_side_items = side_slots_taken * num_groups_;
  const uint8_t* const side_slots = side_slots_taken > 0 ? side_slot_.data() : nullptr;
  for (int slot = 0; slot < group_items; ++slot, dst += sizeof(BatchWorkItem)) {
    const uint32_t word = words[slot];
    write_record(dst, records, partial_steps, static_cast<int32_t>(word >> place_bits),
                 static_cast<int32_t>(word & place_mask), groups,
                 side_slots != nullptr ? side_slots[slot] : 0);
  }
  return prefill_works_ * limits_.num_kv_heads;
}

// The works' costs by kind, once a step, for overlap_decodes() (BatchOverlap::kAuto without a
// partition: whether the step's decode items cost no more than its prefill items, so that spread
// between the prefill tiles and on the side lane they can stream under the math) and
// choose_partition().
void BatchPlanner::weigh_kinds() {
  const BatchWorkItem* const records = work_items_.data();
  const int64_t* const cost = work_cost_.data();
  int64_t prefill = 0, decode = 0;
  for (int i = 0; i < num_works_; ++i) {
    const bool is_prefill = records[i].kind == static_cast<uint16_t>(BatchTileKind::kPrefill);
    (is_prefill ? prefill : decode) += cost[i];
  }
  prefill_cost_ = prefill;
  decode_cost_ = decode;
}

// BatchPlanLimits::spread_decodes: in the lists LPT built, every CTA runs its prefill items first
// and its decodes last, so for most of a mixed step no SM streams KV and at the end all of them
// do, at the HBM's shared rate. Here each CTA's list keeps its items (the balance is assign()'s)
// and the order within each kind, and decode j of its d goes where the load before it comes
// nearest to (j + phase) / d of the CTA's load: at the boundary between two prefill items
// nearest that point. The phase, the fractional part of the CTA's number times the golden ratio,
// staggers the CTAs, so that at any time about the decodes' share of them streams.
void BatchPlanner::spread_decodes(int place_bits) {
  constexpr double kGolden = 0.6180339887498949;
  const BatchWorkItem* const records = work_items_.data();
  const int64_t* const cost = work_cost_.data();
  uint32_t* const prefill = spread_prefill_.data();
  uint32_t* const decode = spread_decode_.data();
  const auto load = [&](uint32_t word) { return static_cast<double>(cost[word >> place_bits]); };
  for (int c = 0; c < group_ctas_; ++c) {
    uint32_t* const list = slot_place_.data() + cta_first_[static_cast<size_t>(c)];
    const int n = cta_count_[static_cast<size_t>(c)];
    int prefills = 0, decodes = 0;
    double total = 0;
    for (int k = 0; k < n; ++k) {
      const uint32_t word = list[k];
      total += load(word);
      if (records[word >> place_bits].kind == static_cast<uint16_t>(BatchTileKind::kPrefill)) {
        prefill[prefills++] = word;
      } else {
        decode[decodes++] = word;
      }
    }
    if (decodes == 0 || prefills == 0) continue;  // one kind: the list stays as it is
    const double spread = static_cast<double>(c) * kGolden;
    const double phase = spread - std::floor(spread);
    // Decode j goes before prefill item k when its target start is nearer the boundary before k
    // (the load placed so far) than the one after it.
    double placed = 0;
    for (int out = 0, j = 0, k = 0; out < n; ++out) {
      const double target = (j + phase) / decodes * total;
      const bool take_decode =
          j < decodes && (k == prefills || target <= placed + load(prefill[k]) / 2);
      const uint32_t word = take_decode ? decode[j++] : prefill[k++];
      list[out] = word;
      placed += load(word);
    }
  }
}

// BatchPlanLimits::side_decodes: on a CTA that has prefill items, its decode items of at most
// kSideMaxRows rows move to the side lane, largest first, each while the side lane's time
// (BatchPlanLimits::side_lane_cost per unit of cost) stays within the CTA's prefill cost, so the
// side lane finishes under the prefill tiles it runs beside and the CTA's time never grows. The
// lists keep their order (the side lane walks the same list); a CTA without prefill keeps every
// decode on the consumers, whose decode rate is the HBM's. Returns the slots of group 0 it moved.
int BatchPlanner::side_decodes(int place_bits) {
  static_assert(
      static_cast<int>(BatchTileKind::kDecodeSide) == static_cast<int>(BatchTileKind::kDecode) + 1,
      "write_items marks a side item by adding 1 to its kind");
  const BatchWorkItem* const records = work_items_.data();
  const int64_t* const cost = work_cost_.data();
  uint8_t* const side = side_slot_.data();
  int moved = 0;
  for (int c = 0; c < group_ctas_; ++c) {
    const int first = cta_first_[static_cast<size_t>(c)];
    const uint32_t* const list = slot_place_.data() + first;
    const int n = cta_count_[static_cast<size_t>(c)];
    int64_t prefill = 0;
    for (int k = 0; k < n; ++k) {
      const uint32_t work = list[k] >> place_bits;
      if (records[work].kind == static_cast<uint16_t>(BatchTileKind::kPrefill)) {
        prefill += cost[work];
      }
    }
    int64_t taken = 0;
    for (int k = 0; k < n; ++k) {
      const uint32_t work = list[k] >> place_bits;
      const BatchWorkItem& r = records[work];
      const bool fits = r.kind == static_cast<uint16_t>(BatchTileKind::kDecode) &&
                        r.row_end - r.row_begin <= kSideMaxRows &&
                        limits_.side_lane_cost * (taken + cost[work]) <= prefill;
      side[first + k] = fits ? 1 : 0;
      if (fits) {
        taken += cost[work];
        ++moved;
      }
    }
  }
  return moved;
}

// Merge records: group by group (batch_plan_layout.hpp), then tile by tile and placement by
// placement (the order make_works numbered group 0's), each from its tile's first chunk; group
// g's is group 0's with g added to the KV head and g groups' rows to the partial row.
void BatchPlanner::write_merges(unsigned char* dst) {
  if (num_merges_ == 0) return;
  for (int i = 0; i < num_tiles_; ++i) {
    const Tile& t = tiles_[static_cast<size_t>(i)];
    if (t.splits <= 1) continue;
    const BatchWorkItem& first = work_items_[static_cast<size_t>(t.first_work)];
    for (int p = 0; p < group_heads_; ++p) {
      BatchMergeRecord m;
      m.request = first.request;
      m.q_start = first.q_start;
      m.row_begin = first.row_begin;
      m.row_end = first.row_end;
      m.partial_stride = first.tile_rows;
      m.num_splits = t.splits;
      const int32_t partial_row = t.partial_base + p * t.splits * first.tile_rows;
      for (int g = 0; g < num_groups_; ++g) {
        m.kv_head = g + p * num_groups_;
        m.partial_row = batch_group_partial_row(partial_row, group_partial_rows_, g);
        const size_t record = static_cast<size_t>(g * group_merges_ + t.merge_base + p);
        std::memcpy(dst + sizeof(BatchMergeRecord) * record, &m, sizeof(m));
      }
    }
  }
}

}  // namespace hopattn::plan
