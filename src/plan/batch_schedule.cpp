// The scheduling half of BatchPlanner (batch_plan.hpp): which units are split into KV chunks
// (a cap on a unit's cost, chosen against a modelled makespan), the order of the work by cost,
// and its longest-processing-time-first assignment to the CTAs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "plan/batch_plan.hpp"  // the class these members belong to
#include "plan/fwd_order.hpp"

namespace hopattn::plan {

// ----------------------------------------------------------------------------- splitting

namespace {

// Split point k (0 < k < n) of the keys [lo, lo + keys) cut n ways: lo + k * keys / n rounded to
// the nearest multiple of kKvChunkKeys. With n <= keys / kKvChunkKeys consecutive ideal points are
// at least kKvChunkKeys apart, so the rounded ones stay strictly increasing and inside
// (lo, lo + keys), and every chunk keeps at least half of kKvChunkKeys keys.
int64_t split_point(int64_t lo, int64_t keys, int64_t n, int64_t k) {
  const int64_t ideal = lo + k * keys / n;
  return (ideal + kKvChunkKeys / 2) / kKvChunkKeys * kKvChunkKeys;
}

// The longest of those chunks: rounding makes them up to a chunk granule longer than keys / n,
// which decides between neighbouring split counts (8193 keys cut 14 ways: 640-key chunks; 16
// ways: 512).
int64_t longest_chunk(int64_t lo, int64_t keys, int n) {
  int64_t longest = 0, begin = lo;
  for (int k = 1; k <= n; ++k) {
    const int64_t end = k < n ? split_point(lo, keys, n, k) : lo + keys;
    longest = std::max(longest, end - begin);
    begin = end;
  }
  return longest;
}

}  // namespace

int BatchPlanner::split_count(const Tile& t, int64_t chunk_cost) const {
  if (t.key_cost <= chunk_cost) return 1;
  const int64_t most =
      std::min<int64_t>((int64_t{t.kv_end} - t.kv_begin) / kKvChunkKeys, kMaxSplits);
  if (most < 2) return 1;
  return static_cast<int>(std::min(most, (t.key_cost + chunk_cost - 1) / chunk_cost));
}

// The longest chunk of the last tile shape asked for: the tiles of a step often share their
// shape (equal lengths), and longest_chunk() walks every split point.
struct BatchPlanner::ChunkMemo {
  int64_t phase = -1, keys = -1;
  int n = 0;
  int64_t longest = 0;
};

struct BatchPlanner::Estimate {
  double makespan = 0;
  bool feasible = true;
};

// The modelled busiest CTA when units above `chunk_cost` are split: the largest of the mean load,
// the largest item, and whole waves of the large items (the split pieces and the candidate units
// left whole, all of about the cap's size: LPT places them first, one a CTA, so a count just
// above a multiple of the grid stacks two on some CTAs). Feasible: the split units and their
// pieces stay within capacity() (below ctas and 2 ctas).
BatchPlanner::Estimate BatchPlanner::estimate(int64_t chunk_cost, int64_t total_key_cost,
                                              int64_t max_unsplit, ChunkMemo& memo) const {
  const int64_t heads = limits_.num_kv_heads;
  const double ctas = limits_.num_ctas;
  int64_t pieces = 0, split_units = 0, whole = 0;
  double large_cost = 0;
  int64_t biggest = max_unsplit;
  for (int c = 0; c < num_candidates_; ++c) {
    const Tile& t = tiles_[static_cast<size_t>(split_candidates_[static_cast<size_t>(c)])];
    large_cost += static_cast<double>(t.key_cost) * static_cast<double>(heads);
    const int n = split_count(t, chunk_cost);
    if (n <= 1) {
      whole += heads;
      biggest = std::max(biggest, t.key_cost);
      continue;
    }
    pieces += n * heads;
    split_units += heads;
    const int64_t keys = int64_t{t.kv_end} - t.kv_begin;
    const int64_t phase = t.kv_begin % kKvChunkKeys;
    if (memo.phase != phase || memo.keys != keys || memo.n != n) {
      memo = {phase, keys, n, longest_chunk(t.kv_begin, keys, n)};
    }
    biggest = std::max(biggest, t.key_cost / keys * memo.longest);
  }
  Estimate e;
  e.feasible = pieces < 2 * limits_.num_ctas && split_units < limits_.num_ctas;
  const double items = static_cast<double>(units_ + pieces - split_units);
  const double mean = (static_cast<double>(total_key_cost) + kItemOverheadCost * items) / ctas;
  e.makespan = std::max(mean, static_cast<double>(biggest + kItemOverheadCost));
  const int64_t large = pieces + whole;
  if (large > 0) {
    const double waves = std::ceil(static_cast<double>(large) / ctas);
    e.makespan = std::max(e.makespan, waves * (large_cost / large + kItemOverheadCost));
  }
  return e;
}

// The cap on a unit's key cost above which it is split (into ceil(cost / cap) chunks). Its start
// C0 balances the largest item against the mean: C + o = (T + o N) / P with N <= U + T / C items
// (U units, overhead o, P CTAs), the positive root of P C^2 + (P o - T - o U) C - o T = 0 (at
// which T / C < P: few split units, few pieces). C0 ignores whole waves and the rounding of chunks
// to kKvChunkKeys, so estimate() compares caps around it: quarter octaves, and the caps that cut
// the largest tile into each count of chunks near its count at C0 (in a step of equal requests,
// every unit). No split at all is the default, which a cap must beat; on a tie the larger cap
// (fewer pieces) stays.
int64_t BatchPlanner::choose_chunk_cost(int64_t total_key_cost, int64_t max_key_cost) {
  constexpr int64_t kNoSplit = std::numeric_limits<int64_t>::max();
  num_candidates_ = 0;
  if (units_ == 0 || limits_.num_ctas == 1) return kNoSplit;
  const double t = static_cast<double>(total_key_cost);
  const double o = static_cast<double>(kItemOverheadCost);
  const double p = limits_.num_ctas;
  const double b = t + o * static_cast<double>(units_) - p * o;
  const double c0 = (b + std::sqrt(b * b + 4 * p * o * t)) / (2 * p);
  constexpr int kLowest = -2, kHighest = 8;  // quarter octaves around C0
  const double lowest = c0 * std::exp2(kLowest / 4.0);
  if (static_cast<double>(max_key_cost) <= lowest) return kNoSplit;

  int64_t max_unsplit = 0;
  for (int i = 0; i < num_tiles_; ++i) {
    const Tile& tile = tiles_[static_cast<size_t>(i)];
    if (static_cast<double>(tile.key_cost) > lowest) {
      split_candidates_[static_cast<size_t>(num_candidates_++)] = i;
    } else {
      max_unsplit = std::max(max_unsplit, tile.key_cost);
    }
  }
  ChunkMemo memo;
  int64_t best = kNoSplit;
  double best_makespan = estimate(kNoSplit, total_key_cost, max_unsplit, memo).makespan;
  auto consider = [&](int64_t cap) {
    if (cap >= max_key_cost || static_cast<double>(cap) < lowest) return;
    const Estimate e = estimate(cap, total_key_cost, max_unsplit, memo);
    if (!e.feasible) return;
    if (e.makespan < best_makespan || (e.makespan == best_makespan && cap > best)) {
      best = cap, best_makespan = e.makespan;
    }
  };
  for (int j = kHighest; j >= kLowest; --j) {
    consider(static_cast<int64_t>(std::ceil(c0 * std::exp2(j / 4.0))));
  }
  const int64_t n0 = static_cast<int64_t>(std::ceil(static_cast<double>(max_key_cost) / c0));
  constexpr int64_t kMostCounts = 64;  // exact counts matter most when they are few
  for (int64_t n = std::max<int64_t>(2, n0 / 2); n <= std::min(2 * n0, kMostCounts); ++n) {
    consider((max_key_cost + n - 1) / n);
  }
  return best;
}

// Cuts each tile into its KV chunks at split_point(), gives split tiles their merge records and
// partial-state rows, and writes each chunk's record (at KV head 0) and cost. A cap that splits
// no tile keeps read_tiles()' works, one a tile. Otherwise the works are numbered front to back,
// then written back to front from the unsplit records: tile i's works start at or after work i,
// so every record a tile is made from is read before any later tile's works overwrite it.
void BatchPlanner::make_works(int64_t chunk_cost) {
  num_merges_ = 0;
  num_partial_rows_ = 0;
  group_merges_ = 0;
  group_partial_rows_ = 0;
  splits_max_ = 1;
  if (chunk_cost >= max_key_cost_) {
    num_works_ = num_tiles_;
    prefill_works_ = prefill_tiles_;
    max_work_cost_ = num_tiles_ > 0 ? max_key_cost_ + kItemOverheadCost : 0;
    return;
  }
  BatchWorkItem* const records = work_items_.data();
  int64_t* const costs = work_cost_.data();
  int32_t* const partial_steps = head_partial_step_.data();
  num_works_ = 0;
  prefill_works_ = 0;
  for (int i = 0; i < num_tiles_; ++i) {
    Tile& t = tiles_[static_cast<size_t>(i)];
    const BatchWorkItem& whole = records[i];
    t.splits = split_count(t, chunk_cost);
    t.first_work = num_works_;
    num_works_ += t.splits;
    if (t.splits > 1) {
      // Numbered within KV-head group 0 (batch_plan_layout.hpp): its placements 0 .. group_heads_
      // - 1 of this tile; group g's copies lie g groups' rows and records further on.
      t.merge_base = group_merges_;
      t.partial_base = group_partial_rows_;
      group_merges_ += group_heads_;
      group_partial_rows_ += group_heads_ * t.splits * whole.tile_rows;
      splits_max_ = std::max(splits_max_, t.splits);
    }
    if (whole.kind == static_cast<uint16_t>(BatchTileKind::kPrefill)) prefill_works_ += t.splits;
  }
  num_merges_ = group_merges_ * num_groups_;
  num_partial_rows_ = group_partial_rows_ * num_groups_;
  max_work_cost_ = 0;
  for (int i = num_tiles_ - 1; i >= 0; --i) {
    const Tile& t = tiles_[static_cast<size_t>(i)];
    const BatchWorkItem whole = records[i];
    const bool split = t.splits > 1;
    const int64_t key_cost =
        batch_key_cost(static_cast<BatchTileKind>(whole.kind), whole.tile_rows);
    const int64_t lo = t.kv_begin, keys = int64_t{t.kv_end} - t.kv_begin;
    int64_t begin = lo;
    for (int k = 0; k < t.splits; ++k) {
      int64_t end = t.kv_end;
      if (k + 1 < t.splits) end = split_point(lo, keys, t.splits, k + 1);
      const int w = t.first_work + k;
      BatchWorkItem& it = records[w];
      it = whole;
      it.kv_begin = static_cast<int32_t>(begin);
      it.kv_end = static_cast<int32_t>(end);
      it.partial_row = split ? t.partial_base + k * whole.tile_rows : -1;
      it.merge = split ? t.merge_base : -1;
      // Group 0's placement p (KV head p * num_groups_): its partial block p times this much
      // further on, its merge record p further.
      partial_steps[w] = split ? t.splits * whole.tile_rows : 0;
      const int64_t cost = (end - begin) * key_cost + kItemOverheadCost;
      costs[w] = cost;
      max_work_cost_ = std::max(max_work_cost_, cost);
      begin = end;
    }
  }
}

// ----------------------------------------------------------------------------- assignment

namespace {

// Buckets of the cost sort: the top seven bits of a cost (its leading one and six more), so a
// bucket spans costs within a factor 1 + 1/64; each bucket is then sorted exactly. Finer buckets
// than 16 an octave leave fewer works to the insertion sorts (a step's distinct lengths).
constexpr int kBucketBits = 6;
int cost_bucket(int64_t cost) {
  const uint64_t c = static_cast<uint64_t>(cost);
  const int msb = 63 - __builtin_clzll(c | 1);
  const uint64_t frac = msb >= kBucketBits ? c >> (msb - kBucketBits) : c << (kBucketBits - msb);
  return msb << kBucketBits | static_cast<int>(frac & ((1 << kBucketBits) - 1));
}

}  // namespace

// order_ = works_ by decreasing cost, ties in creation order: a counting pass over cost buckets,
// then each bucket ordered by its exact costs, both stable. Small buckets take an insertion sort;
// large ones (a step of equal requests or a window's equal tiles: few distinct costs, thousands
// of works) a least-significant-digit radix sort on max - cost, a byte a pass over only the bits
// the bucket's range needs (a bucket spans costs within 1/64 of each other).
void BatchPlanner::sort_works() {
  static_assert(kCostBuckets == 64 << kBucketBits, "64 octaves of cost buckets");
  const int num_works = num_works_;
  if (num_works == 0) return;
  const int64_t* cost = work_cost_.data();
  int32_t* start = bucket_start_.data();
  uint16_t* bucket = work_bucket_.data();
  // Only the buckets from the lowest to the highest one used are cleared and walked (a step's
  // costs span a few octaves of the 64: the full walk was most of the sort's time on a few
  // hundred works).
  int lowest = kCostBuckets, highest = -1;
  for (int i = 0; i < num_works; ++i) {
    // Bucket kCostBuckets - 1 - b holds costs of bucket b: ascending positions = decreasing cost.
    const int r = kCostBuckets - 1 - cost_bucket(cost[i]);
    bucket[i] = static_cast<uint16_t>(r);
    lowest = std::min(lowest, r);
    highest = std::max(highest, r);
  }
  std::fill(start + lowest, start + highest + 2, 0);
  for (int i = 0; i < num_works; ++i) ++start[bucket[i] + 1];
  // The running sum in a register: a sum through memory waits on each store's forwarding (a
  // step's costs span hundreds of buckets).
  for (int b = lowest + 1, sum = 0; b <= highest + 1; ++b) {
    sum += start[b];
    start[b] = sum;
  }
  // start[b] now ends bucket b - 1 (reversed index); place back to front to keep creation order.
  for (int i = num_works - 1; i >= 0; --i) order_[static_cast<size_t>(--start[bucket[i] + 1])] = i;
  // start[b + 1] is now bucket b's first position; bucket b ends where bucket b + 1 starts.
  constexpr int kInsertionMost = 32;
  for (int b = lowest; b <= highest; ++b) {
    const int32_t first = start[b + 1];
    const int32_t last = b < highest ? start[b + 2] : num_works;
    int32_t* o = order_.data() + first;
    const int32_t n = last - first;
    if (n <= 1) continue;
    if (n <= kInsertionMost) {
      for (int32_t i = 1; i < n; ++i) {
        const int32_t w = o[i];
        int32_t j = i;
        for (; j > 0 && cost[o[j - 1]] < cost[w]; --j) o[j] = o[j - 1];
        o[j] = w;
      }
      continue;
    }
    int64_t lo = cost[o[0]], hi = lo;
    for (int32_t i = 1; i < n; ++i) {
      lo = std::min(lo, cost[o[i]]);
      hi = std::max(hi, cost[o[i]]);
    }
    int32_t* from = o;
    int32_t* to = sort_scratch_.data();
    for (int shift = 0; (hi - lo) >> shift != 0; shift += 8) {
      int32_t count[257] = {};
      for (int32_t i = 0; i < n; ++i) ++count[((hi - cost[from[i]]) >> shift & 255) + 1];
      for (int d = 1, sum = 0; d <= 256; ++d) {
        sum += count[d];
        count[d] = sum;
      }
      for (int32_t i = 0; i < n; ++i) to[count[(hi - cost[from[i]]) >> shift & 255]++] = from[i];
      std::swap(from, to);
    }
    if (from != o) std::copy(from, from + n, o);
  }
}

// The part's winner tree (batch_plan.hpp, tree_): leaf i holds CTA part_first_ + i's key from
// `keys` (indexed from the part's first CTA; keys == nullptr: every load 0), padding leaves the
// largest key; then every inner node from the leaves up, the lesser child.
void BatchPlanner::build_tree(const uint64_t* keys) {
  const int leaves = part_leaves_;
  uint64_t* tree = tree_.data();
  for (int i = 0; i < leaves; ++i) {
    uint64_t key = ~uint64_t{0};
    if (i < part_ctas_) key = keys != nullptr ? keys[i] : static_cast<uint64_t>(part_first_ + i);
    tree[leaves + i] = key;
  }
  for (int k = leaves - 1; k >= 1; --k) tree[k] = std::min(tree[2 * k], tree[2 * k + 1]);
}

// `count` items of one cost (`step`: the cost as a key increment) from placement `item` on, each
// onto the part's least-loaded CTA (the lowest-numbered of equal ones), in O(count + ctas log
// ctas): with every cost equal, the key a CTA leaves with (its key + step) is never below one
// left before it in the run (the keys taken only grow), so the CTAs the run has loaded form a FIFO
// in key order, and the next CTA is the lesser of that FIFO's front and the front of the CTAs by
// key at the run's start. The tree is rebuilt from the keys afterwards.
void BatchPlanner::assign_run(uint64_t step, int64_t count, int64_t& item) {
  const int ctas = part_ctas_;
  const uint64_t cta_mask = (uint64_t{1} << cta_bits_) - 1;
  uint64_t* sorted = run_sorted_.data();
  uint64_t* fifo = run_fifo_.data();
  uint64_t* keys = run_keys_.data();
  const uint64_t* leaves = tree_.data() + part_leaves_;
  std::copy(leaves, leaves + ctas, keys);
  std::copy(keys, keys + ctas, sorted);
  std::sort(sorted, sorted + ctas);
  int next = 0;            // sorted[next..] not yet loaded by the run
  int head = 0, size = 0;  // fifo ring
  for (int64_t k = 0; k < count; ++k, ++item) {
    const bool from_fifo = size > 0 && (next == ctas || fifo[head] < sorted[next]);
    const uint64_t low = from_fifo ? fifo[head] : sorted[next];
    if (from_fifo) {
      head = head + 1 == ctas ? 0 : head + 1;
      --size;
    } else {
      ++next;
    }
    const auto cta = static_cast<int32_t>(low & cta_mask);
    place_cta_[static_cast<size_t>(item)] = cta;
    place_rank_[static_cast<size_t>(item)] = cta_count_[static_cast<size_t>(cta)]++;
    int tail = head + size;
    if (tail >= ctas) tail -= ctas;
    fifo[tail] = low + step;
    ++size;
  }
  for (int i = 0; i < size; ++i) {
    const uint64_t key = fifo[(head + i) % ctas];
    keys[(key & cta_mask) - static_cast<uint64_t>(part_first_)] = key;
  }
  build_tree(keys);
}

// Longest processing time first within group 0 (batch_plan.hpp, group_ctas_): its placements in
// decreasing cost (each work's group_heads_ of them in a row), each onto the least-loaded CTA of
// its part (the whole group, or one side of a partition), the lowest-numbered of equally loaded
// ones. The choice is the root of the part's winner tree (leaf part_leaves_ + i for the part's
// CTA i, a node the lesser child; a key is load << cta_bits_ | CTA, so the least key is the least
// load, then the lowest CTA), and placing an item walks its leaf's path back up, one
// compare-and-move a level. Long runs of equal-cost items (a step of equal requests: thousands
// of them) take assign_run() instead, in constant time an item. Each placement's place in its
// CTA's list is counted on the way. With a partition (partition_decodes) the prefill works (first
// in order_, partition_order) go onto CTAs [0, partition_) and the decode works onto the rest,
// each part on a tree of its own CTAs (a shallower walk than the group's).
void BatchPlanner::assign() {
  std::fill(cta_count_.begin(), cta_count_.end(), 0);
  int64_t item = 0;
  if (partition_ == 0) {
    assign_part(0, group_ctas_, 0, num_works_, item);
  } else {
    assign_part(0, partition_, 0, prefill_works_, item);
    assign_part(partition_, group_ctas_, prefill_works_, num_works_, item);
  }
}

// The placements of order_[begin, end) onto CTAs [first, last) of the group, from load 0 (CTAs
// from `loaded_from` on, when past `first`: from initial_load), and those CTAs' loads: the walk
// unrolled for the part's tree depth (parts of up to 1024 CTAs), a loop otherwise. A part of
// one CTA has a tree of one leaf (no levels).
void BatchPlanner::assign_part(int first, int last, int begin, int end, int64_t& item,
                               int loaded_from, int64_t initial_load) {
  part_first_ = first;
  part_ctas_ = last - first;
  part_bits_ = ceil_log2(part_ctas_);
  part_leaves_ = 1 << part_bits_;
  if (loaded_from > first && initial_load > 0) {
    uint64_t* const keys = run_keys_.data();
    for (int c = first; c < last; ++c) {
      const uint64_t load = c >= loaded_from ? static_cast<uint64_t>(initial_load) : 0;
      keys[c - first] = load << cta_bits_ | static_cast<uint64_t>(c);
    }
    build_tree(keys);
  } else {
    build_tree(nullptr);
  }
  switch (part_bits_) {
    case 0:
      assign_range<0>(begin, end, item);
      break;
    case 1:
      assign_range<1>(begin, end, item);
      break;
    case 2:
      assign_range<2>(begin, end, item);
      break;
    case 3:
      assign_range<3>(begin, end, item);
      break;
    case 4:
      assign_range<4>(begin, end, item);
      break;
    case 5:
      assign_range<5>(begin, end, item);
      break;
    case 6:
      assign_range<6>(begin, end, item);
      break;
    case 7:
      assign_range<7>(begin, end, item);
      break;
    case 8:
      assign_range<8>(begin, end, item);
      break;
    case 9:
      assign_range<9>(begin, end, item);
      break;
    case 10:
      assign_range<10>(begin, end, item);
      break;
    default:
      assign_range<-1>(begin, end, item);
      break;
  }
  const uint64_t* const keys = tree_.data() + part_leaves_;
  for (int c = first; c < last; ++c) {
    cta_load_[static_cast<size_t>(c)] = static_cast<int64_t>(keys[c - first] >> cta_bits_);
  }
}

// The placements of order_[begin, end) onto the current part's tree (assign_part), kLevels its
// depth (-1: part_bits_, at run time).
template <int kLevels>
void BatchPlanner::assign_range(int begin, int end, int64_t& item) {
  const int per_work = group_heads_;
  const int leaves = part_leaves_;
  const int first = part_first_;
  const uint64_t cta_mask = (uint64_t{1} << cta_bits_) - 1;
  uint64_t* const tree = tree_.data();
  int32_t* const place_cta = place_cta_.data();
  int32_t* const place_rank = place_rank_.data();
  int32_t* const cta_count = cta_count_.data();
  // The root stays in a register from one placement to the next, and from one run to the next
  // (reread only after assign_run() rebuilt the tree): a reload right after the walk stored it
  // waits on store forwarding.
  uint64_t root = tree[1];
  for (int i = begin; i < end;) {
    const int64_t cost = work_cost_[static_cast<size_t>(order_[static_cast<size_t>(i)])];
    const uint64_t step = static_cast<uint64_t>(cost) << cta_bits_;
    int j = i + 1;
    while (j < end && work_cost_[static_cast<size_t>(order_[static_cast<size_t>(j)])] == cost) {
      ++j;
    }
    const int64_t run = int64_t{j - i} * per_work;
    i = j;
    if (run >= kAssignRunItemsMin) {
      assign_run(step, run, item);
      root = tree[1];
      continue;
    }
    for (int64_t n = 0; n < run; ++n, ++item) {
      uint64_t key = root + step;
      const auto cta = static_cast<int32_t>(key & cta_mask);
      place_cta[item] = cta;
      place_rank[item] = cta_count[cta]++;
      size_t k = static_cast<size_t>(leaves + cta - first);
      tree[k] = key;
      // kLevels >= 0: a constant trip count, unrolled, so no loop exit to mispredict; -1: the
      // tree's depth at run time.
      const int levels = kLevels >= 0 ? kLevels : part_bits_;
#pragma GCC unroll 16
      for (int l = 0; l < levels; ++l) {
        key = std::min(key, tree[k ^ 1]);
        k >>= 1;
        tree[k] = key;
      }
      root = key;
    }
  }
}

// partition_decodes: the split of each group's CTAs (batch_plan.hpp), from the works' costs by
// kind: the P of least modelled time max(prefill / P, decode / min((G - P) r, G)).
int BatchPlanner::choose_partition() const {
  if (limits_.partition_ctas > 0) return std::min(limits_.partition_ctas, group_ctas_ - 1);
  return modelled_split(limits_.decode_cta_rate_milli, 1.0, 0.0);
}

// The split model of the partition and of the concurrent form, over a group's G CTAs and the
// works' costs by kind: P prefill CTAs take prefill / P, the decodes on the other G - P take
// decode / min((G - P) r, cap G) (r = rate_milli / 1000: how much faster than its even share of
// the HBM a CTA streaming decodes alone goes; cap G: the most of the card's stream they get).
// Returns the least modelled time's P or, of the splits within `tolerance` of it, the one with the
// most prefill CTAs.
int BatchPlanner::modelled_split(int rate_milli, double cap, double tolerance) const {
  const double prefill = static_cast<double>(prefill_cost_);
  const int g = group_ctas_;
  int best = 1;
  double best_time = std::numeric_limits<double>::infinity();
  for (int parts = 1; parts < g; ++parts) {
    const double t = std::max(prefill / parts, modelled_decode_time(rate_milli, cap, parts));
    if (t < best_time * (1.0 + tolerance)) {
      best_time = std::min(best_time, t);
      best = parts;
    }
  }
  return best;
}

// The split model's time of the decodes on the G - P CTAs a group that P prefill CTAs leave:
// decode / min((G - P) r, cap G), in the model's units (a work's cost once).
double BatchPlanner::modelled_decode_time(int rate_milli, double cap, int parts) const {
  const int g = group_ctas_;
  const double stream = std::min((g - parts) * (rate_milli / 1000.0), cap * g);
  return static_cast<double>(decode_cost_) / stream;
}

// partition_decodes: order_ (decreasing cost) split into its prefill works, then its decode works,
// each in the order it had.
void BatchPlanner::partition_order() {
  const BatchWorkItem* const records = work_items_.data();
  int32_t* const order = order_.data();
  int32_t* const decodes = sort_scratch_.data();
  int prefills = 0, n = 0;
  for (int i = 0; i < num_works_; ++i) {
    const int32_t w = order[i];
    if (records[w].kind == static_cast<uint16_t>(BatchTileKind::kPrefill)) {
      order[prefills++] = w;
    } else {
      decodes[n++] = w;
    }
  }
  std::copy(decodes, decodes + n, order + prefills);
}

// BatchPlanLimits::l2_bytes: order_[0, count), the prefill works by decreasing cost, regrouped
// into sections of consecutive requests (works are made request by request) whose K/V fits
// fwd_section_bytes, the section of the costliest work first, then the section of the
// costliest work left, each keeping its decreasing order (a stable counting sort on the
// sections' ranks). The assignment stays list scheduling (each work onto the least-loaded CTA),
// so the busiest CTA still carries at most the mean plus the largest work.
void BatchPlanner::section_prefills(int count) {
  constexpr int kMostSections = (kCostBuckets + 1) / 2;  // bucket_start_ holds ranks and counts
  const bool growing =
      fwd_growing_diagonal(limits_.window.left, limits_.causal ? 0 : limits_.window.right);
  const int64_t limit = fwd_section_bytes(limits_.l2_bytes, growing);
  // 16-bit K and V rows of every KV head
  const int64_t row_bytes = int64_t{limits_.head_dim + limits_.dv()} * 2 * limits_.num_kv_heads;
  const BatchWorkItem* const records = work_items_.data();
  uint16_t* const section = work_bucket_.data();  // free after sort_works()
  int sections = 0;
  int64_t held = 0;
  int32_t request = -1;
  for (int w = 0; w < num_works_; ++w) {
    if (records[w].kind != static_cast<uint16_t>(BatchTileKind::kPrefill)) continue;
    if (records[w].request != request) {
      request = records[w].request;
      const int64_t bytes = int64_t{records[w].kv_len} * row_bytes;
      if (sections == 0 || (held + bytes > limit && sections < kMostSections)) {
        ++sections;
        held = 0;
      }
      held += bytes;
    }
    section[w] = static_cast<uint16_t>(sections - 1);
  }
  if (sections <= 1) return;
  int32_t* const rank = bucket_start_.data();
  int32_t* const start = rank + kMostSections;
  std::fill(rank, rank + sections, -1);
  std::fill(start, start + sections + 1, 0);
  int32_t* const order = order_.data();
  int ranked = 0;
  for (int i = 0; i < count; ++i) {
    int32_t& r = rank[section[order[i]]];
    if (r < 0) r = ranked++;
    ++start[r + 1];
  }
  for (int r = 1; r <= ranked; ++r) start[r] += start[r - 1];
  int32_t* const sorted = sort_scratch_.data();
  for (int i = 0; i < count; ++i) sorted[start[rank[section[order[i]]]]++] = order[i];
  std::copy(sorted, sorted + count, order);
}

}  // namespace hopattn::plan
