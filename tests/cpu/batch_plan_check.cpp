#include "batch_plan_check.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <numeric>
#include <ostream>
#include <sstream>

#include "hopattn/error.hpp"
#include "plan/decode_plan.hpp"
#include "plan/fwd_order.hpp"

namespace hopattn::plan::check {

bool rule_visible(const BatchPlanLimits& l, int64_t i, int64_t j, int64_t q_len, int64_t kv_len) {
  if (j < 0 || j >= kv_len) return false;
  const int64_t diag = i + kv_len - q_len;
  if (l.causal && j > diag) return false;
  if (l.window.left >= 0 && j < diag - l.window.left) return false;
  if (l.window.right >= 0 && j > diag + l.window.right) return false;
  return true;
}

// Each condition of the rule bounds j from one side.
KeyRange row_keys(const BatchPlanLimits& l, int64_t i, int64_t q_len, int64_t kv_len) {
  const int64_t diag = i + kv_len - q_len;
  int64_t lo = 0, hi = kv_len;
  if (l.window.left >= 0) lo = std::max(lo, diag - l.window.left);
  if (l.causal) hi = std::min(hi, diag + 1);
  if (l.window.right >= 0) hi = std::min(hi, diag + l.window.right + 1);
  return {lo, std::max(lo, hi)};
}

Step step_of(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& kv_lens) {
  Step s;
  s.cu.assign(1, 0);
  for (int32_t q : q_lens) s.cu.push_back(s.cu.back() + q);
  s.kv = kv_lens;
  return s;
}

std::string describe(const BatchPlanLimits& l) {
  std::ostringstream os;
  os << "Hq " << l.num_qo_heads << " Hkv " << l.num_kv_heads << " D " << l.head_dim << " page "
     << l.page_size << (l.causal ? " causal" : " full") << " window (" << l.window.left << ", "
     << l.window.right << ") ctas " << l.num_ctas << " max_batch " << l.max_batch << " max_tokens "
     << l.max_tokens;
  return os.str();
}

std::string describe(const Step& s) {
  std::ostringstream os;
  os << "B " << s.batch() << " (q_len/kv_len):";
  for (int b = 0; b < s.batch(); ++b) os << ' ' << s.q_len(b) << '/' << s.kv[b];
  return os.str();
}

BatchPlanLimits llama8b(int ctas) {
  BatchPlanLimits l;
  l.num_qo_heads = 32;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  l.page_size = 16;
  l.causal = true;
  l.num_ctas = ctas;
  return l;
}

Buffer::Buffer(size_t plan_bytes) : bytes_(plan_bytes + kBatchPlanAlign + kGuardBytes, kFill) {}

unsigned char* Buffer::data() {
  const uintptr_t p = reinterpret_cast<uintptr_t>(bytes_.data());
  return bytes_.data() + (kBatchPlanAlign - p % kBatchPlanAlign) % kBatchPlanAlign;
}

size_t Buffer::usable() const { return bytes_.size() - kBatchPlanAlign - kGuardBytes; }

void Buffer::refill() { std::fill(bytes_.begin(), bytes_.end(), kFill); }

Plan read_plan(const unsigned char* base) {
  Plan p;
  std::memcpy(&p.header, base, sizeof(p.header));
  const BatchPlanHeader& h = p.header;
  // Group 0's lists as stored, then every group's (batch_plan_layout.hpp), as the kernel runs them.
  std::vector<int32_t> local(static_cast<size_t>(std::max(0, h.group_ctas + 1)));
  std::memcpy(local.data(), base + h.cta_offsets_offset, sizeof(int32_t) * local.size());
  std::vector<BatchWorkItem> stored(static_cast<size_t>(std::max(0, h.group_items)));
  std::memcpy(stored.data(), base + h.items_offset, sizeof(BatchWorkItem) * stored.size());
  for (int g = 0; g < h.num_groups; ++g) {
    for (int l = 0; l < h.group_ctas; ++l) {
      p.cta_offsets.push_back(static_cast<int32_t>(p.items.size()));
      for (int i = local[size_t(l)]; i < local[size_t(l) + 1]; ++i) {
        p.items.push_back(batch_group_item(stored[size_t(i)], h, g));
      }
    }
  }
  p.cta_offsets.push_back(static_cast<int32_t>(p.items.size()));
  p.merges.resize(static_cast<size_t>(std::max(0, h.num_merges)));
  std::memcpy(p.merges.data(), base + h.merges_offset, sizeof(BatchMergeRecord) * p.merges.size());
  return p;
}

std::vector<int> prefill_section_ranks(const BatchPlanLimits& l, const Step& s, const Plan& p,
                                       const BatchPlanInfo& info) {
  std::vector<int> rank(static_cast<size_t>(s.batch()), 0);
  std::vector<char> prefill(static_cast<size_t>(s.batch()), 0);
  bool decodes = false;
  for (const BatchWorkItem& it : p.items) {
    if (it.kind == uint16_t(BatchTileKind::kPrefill)) {
      prefill[static_cast<size_t>(it.request)] = 1;
    } else {
      decodes = true;
    }
  }
  if (l.l2_bytes <= 0 || (decodes && info.partition_ctas == 0)) return rank;
  const bool growing = fwd_growing_diagonal(l.window.left, l.causal ? 0 : l.window.right);
  const int64_t limit = fwd_section_bytes(l.l2_bytes, growing);
  const int64_t row_bytes = int64_t{l.head_dim + l.dv()} * 2 * l.num_kv_heads;
  std::vector<int> section(static_cast<size_t>(s.batch()), 0);
  int sections = 0;
  int64_t held = 0;
  for (int b = 0; b < s.batch(); ++b) {
    if (!prefill[static_cast<size_t>(b)]) continue;
    const int64_t bytes = int64_t{s.kv[static_cast<size_t>(b)]} * row_bytes;
    if (sections == 0 || held + bytes > limit) {
      ++sections;
      held = 0;
    }
    held += bytes;
    section[static_cast<size_t>(b)] = sections - 1;
  }
  std::vector<int64_t> top(static_cast<size_t>(std::max(sections, 1)), 0);
  for (const BatchWorkItem& it : p.items) {
    if (it.kind != uint16_t(BatchTileKind::kPrefill)) continue;
    int64_t& t = top[static_cast<size_t>(section[static_cast<size_t>(it.request)])];
    t = std::max(t, batch_item_cost(it));
  }
  std::vector<int> by_rank(top.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::stable_sort(by_rank.begin(), by_rank.end(), [&](int a, int b) {
    return top[static_cast<size_t>(a)] > top[static_cast<size_t>(b)];
  });
  std::vector<int> rank_of_section(top.size());
  for (size_t r = 0; r < by_rank.size(); ++r) {
    rank_of_section[static_cast<size_t>(by_rank[r])] = static_cast<int>(r);
  }
  for (int b = 0; b < s.batch(); ++b) {
    rank[static_cast<size_t>(b)] =
        rank_of_section[static_cast<size_t>(section[static_cast<size_t>(b)])];
  }
  return rank;
}

namespace {

// Collects the first failed expectation as text (the caller adds seed and composition).
class Failure {
 public:
  template <class... Parts>
  bool expect(bool ok, const Parts&... parts) {
    if (!ok && message_.empty()) message_ = detail::concat(parts...);
    return ok;
  }
  bool failed() const { return !message_.empty(); }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// An item in a failure message; printed only when a message is built.
struct Show {
  const BatchWorkItem& it;
};
std::ostream& operator<<(std::ostream& os, Show s) {
  const BatchWorkItem& it = s.it;
  return os << "item {request " << it.request << ", kv_head " << it.kv_head << ", rows ["
            << it.row_begin << ", " << it.row_end << "), keys [" << it.kv_begin << ", " << it.kv_end
            << "), kind " << it.kind << ", tile_rows " << it.tile_rows << ", partial_row "
            << it.partial_row << ", merge " << it.merge << "}";
}

// ------------------------------------------------------------------------ the invariants
// Header, offsets, guard, capacity and balance.
void check_layout(const BatchPlanLimits& l, const Step& s, const BatchPlanInfo& info,
                  const unsigned char* base, const Plan& p, Failure& f) {
  const BatchPlanHeader& h = p.header;
  const BatchPlanCapacity cap = BatchPlanner::capacity(l);
  const size_t static_bytes = BatchPlanner::workspace_bytes(l);
  f.expect(h.magic == kBatchPlanMagic && h.version == kBatchPlanVersion, "magic/version");
  f.expect(h.num_ctas == l.num_ctas && h.num_requests == s.batch() && h.total_q == s.cu.back() &&
               h.group == l.num_qo_heads / l.num_kv_heads && h.num_kv_heads == l.num_kv_heads,
           "header sizes");
  const int groups = std::gcd(l.num_kv_heads, l.num_ctas);
  f.expect(h.num_groups == groups && h.group_ctas * groups == h.num_ctas &&
               h.group_items * groups == h.num_items &&
               h.group_partial_rows * groups == h.num_partial_rows && h.num_merges % groups == 0,
           "header groups");
  const BatchPlanOffsets off = batch_plan_offsets(h.group_ctas, h.group_items, h.num_merges);
  f.expect(h.cta_offsets_offset == off.cta_offsets && h.items_offset == off.items &&
               h.merges_offset == off.merges && h.used_bytes == off.end,
           "header offsets");
  f.expect(info.used_bytes == h.used_bytes && info.num_items == h.num_items &&
               info.num_merges == h.num_merges && info.num_partial_rows == h.num_partial_rows,
           "info and header disagree");
  f.expect(h.used_bytes <= static_bytes, "used bytes ", h.used_bytes, " > static query ",
           static_bytes);
  f.expect(h.num_items <= cap.max_items && h.num_merges <= cap.max_merges &&
               h.num_partial_rows <= cap.max_partial_rows,
           "capacity: items ", h.num_items, "/", cap.max_items, " merges ", h.num_merges, "/",
           cap.max_merges, " partial rows ", h.num_partial_rows, "/", cap.max_partial_rows);
  f.expect(h.num_prefill_items + h.num_decode_items == h.num_items, "kind counts");
  // Nothing written past the used bytes: the guard beyond the static size, and everything up to
  // it, still holds the fill pattern.
  // With a concurrent form: its plan from plan_offset to plan_end, the gap before it untouched.
  const unsigned char* end = base + static_bytes + kGuardBytes;
  const bool form = info.concurrent.prefill_ctas > 0;
  const unsigned char* gap_end = form ? base + info.concurrent.plan_offset : end;
  const unsigned char* touched =
      std::find_if(base + h.used_bytes, gap_end, [](unsigned char c) { return c != kFill; });
  f.expect(touched == gap_end, "byte ", touched - base, " past the used ", h.used_bytes,
           " was written");
  if (form) {
    f.expect(info.concurrent.plan_offset % 16 == 0 && info.concurrent.plan_offset >= h.used_bytes &&
                 info.concurrent.plan_end <= static_bytes,
             "concurrent plan at [", info.concurrent.plan_offset, ", ", info.concurrent.plan_end,
             ") of ", static_bytes);
    touched = std::find_if(base + info.concurrent.plan_end, end,
                           [](unsigned char c) { return c != kFill; });
    f.expect(touched == end, "byte ", touched - base, " past the concurrent plan's end ",
             info.concurrent.plan_end, " was written");
  }
  f.expect(p.cta_offsets.front() == 0 && p.cta_offsets.back() == h.num_items, "CTA offsets ends");

  // The overlap the step got: none where the limits forbid it, and every side item counted.
  f.expect(!info.decodes_spread || l.spread_decodes != BatchOverlap::kOff,
           "decodes spread against the limits");
  f.expect(info.num_side_items == std::count_if(p.items.begin(), p.items.end(),
                                                [](const BatchWorkItem& it) {
                                                  return it.kind ==
                                                         uint16_t(BatchTileKind::kDecodeSide);
                                                }),
           "info.num_side_items ", info.num_side_items);

  // Balance: LPT's bound, max <= mean + largest item, as max * P <= total + P * largest; with a
  // partition (partition_decodes) within each part, whose CTAs run one kind each.
  const int group_ctas = h.num_ctas / std::gcd(l.num_kv_heads, h.num_ctas);
  const int parts = info.partition_ctas > 0 ? 2 : 1;
  f.expect(info.partition_ctas == 0 ||
               (l.partition_decodes != BatchOverlap::kOff && info.partition_ctas < group_ctas),
           "partition of ", info.partition_ctas, " CTAs of ", group_ctas);
  const auto part_of = [&](int c) {
    return parts == 2 && c % group_ctas >= info.partition_ctas ? 1 : 0;
  };
  int64_t part_total[2] = {0, 0}, part_busiest[2] = {0, 0}, part_largest[2] = {0, 0};
  int part_ctas[2] = {0, 0};
  int64_t total = 0, busiest = 0, largest = 0;
  const std::vector<int> section = prefill_section_ranks(l, s, p, info);
  for (int c = 0; c < h.num_ctas; ++c) {
    if (!f.expect(p.cta_offsets[c] <= p.cta_offsets[c + 1], "CTA offsets decrease at ", c)) return;
    // Largest first; with spread decodes, within each kind (prefill, decode); with prefill
    // sections, the prefill items section by section, largest first within each.
    int64_t load = 0, previous[2] = {std::numeric_limits<int64_t>::max(),
                                     std::numeric_limits<int64_t>::max()};
    int previous_section = 0;
    int64_t prefill = 0, side = 0;  // side_decodes: the side lane's load within the prefill's
    const int part = part_of(c);
    for (int i = p.cta_offsets[c]; i < p.cta_offsets[c + 1]; ++i) {
      const int64_t cost = batch_item_cost(p.items[i]);
      if (parts == 2) {
        f.expect((p.items[i].kind == uint16_t(BatchTileKind::kPrefill)) == (part == 0), "CTA ", c,
                 " of partition part ", part, " runs an item of the other kind");
      }
      part_largest[part] = std::max(part_largest[part], cost);
      if (p.items[i].kind == uint16_t(BatchTileKind::kPrefill)) prefill += cost;
      if (p.items[i].kind == uint16_t(BatchTileKind::kDecodeSide)) side += cost;
      const int kind =
          info.decodes_spread && p.items[i].kind != uint16_t(BatchTileKind::kPrefill) ? 1 : 0;
      if (p.items[i].kind == uint16_t(BatchTileKind::kPrefill)) {
        const int sec = section[static_cast<size_t>(p.items[i].request)];
        f.expect(sec >= previous_section, "CTA ", c, " runs prefill section ", sec, " after ",
                 previous_section);
        if (sec > previous_section) previous[kind] = std::numeric_limits<int64_t>::max();
        previous_section = sec;
      }
      f.expect(cost <= previous[kind], "CTA ", c, " does not run its items largest first");
      previous[kind] = cost;
      load += cost;
      largest = std::max(largest, cost);
    }
    total += load;
    busiest = std::max(busiest, load);
    part_total[part] += load;
    part_busiest[part] = std::max(part_busiest[part], load);
    ++part_ctas[part];
    f.expect(l.side_lane_cost * side <= prefill, "CTA ", c, ": side lane load ", side, " x ",
             l.side_lane_cost, " exceeds its prefill load ", prefill);
  }
  f.expect(
      info.total_cost == total && info.max_cta_cost == busiest && info.max_item_cost == largest,
      "info costs");
  for (int q = 0; q < parts; ++q) {
    const int64_t n = part_ctas[q];
    f.expect(part_busiest[q] * n <= part_total[q] + n * part_largest[q], "balance (part ", q,
             "): busiest CTA ", part_busiest[q], " > mean ", n > 0 ? part_total[q] / n : 0,
             " + largest item ", part_largest[q]);
  }
}

// One item on its own: request fields, tile shape, clipped and aligned keys, partial block.
void check_item(const BatchPlanLimits& l, const Step& s, const Plan& p, const BatchWorkItem& it,
                Failure& f) {
  const int64_t group = l.num_qo_heads / l.num_kv_heads;
  if (!f.expect(it.request >= 0 && it.request < s.batch() && it.kv_head >= 0 &&
                    it.kv_head < l.num_kv_heads,
                "request/head out of range: ", Show{it})) {
    return;
  }
  const int64_t q = s.q_len(it.request), kv = s.kv[it.request];
  f.expect(it.q_start == s.cu[it.request] && it.q_len == q && it.kv_len == kv,
           "request fields: ", Show{it});
  f.expect(it.row_begin >= 0 && it.row_begin < it.row_end && it.row_end <= q * group &&
               it.row_begin % group == 0 && it.row_end % group == 0,
           "rows not whole positions of the request: ", Show{it});
  f.expect(it.row_end - it.row_begin <= it.tile_rows, "rows exceed the tile: ", Show{it});
  const int decode_rows = decode_tile_rows(q * group);
  if (decode_rows > 0) {
    // side_decodes: a decode tile of at most kSideMaxRows rows may run on the side lane.
    const bool side = it.kind == uint16_t(BatchTileKind::kDecodeSide) &&
                      l.side_decodes != BatchOverlap::kOff &&
                      it.row_end - it.row_begin <= kSideMaxRows;
    f.expect((it.kind == uint16_t(BatchTileKind::kDecode) || side) && it.tile_rows == decode_rows &&
                 it.row_begin == 0 && it.row_end == q * group,
             "a short request is one decode tile: ", Show{it});
  } else {
    f.expect(it.kind == uint16_t(BatchTileKind::kPrefill) && it.tile_rows == kPrefillTileRows &&
                 it.row_begin % (prefill_positions_per_tile(int(group)) * group) == 0,
             "prefill tile shape: ", Show{it});
  }
  // Keys: inside what the item's rows see, touching its first and last such key unless split
  // there (then on a chunk boundary); empty only when its rows see nothing.
  const int64_t first = row_keys(l, it.row_begin / group, q, kv).lo;
  const int64_t last = row_keys(l, (it.row_end - 1) / group, q, kv).hi;
  f.expect(it.kv_begin >= first && it.kv_end <= last && it.kv_begin <= it.kv_end,
           "keys outside what the rows see [", first, ", ", last, "): ", Show{it});
  f.expect(it.kv_begin < it.kv_end || first >= last, "empty work scheduled: ", Show{it});
  f.expect(it.kv_begin == first || it.kv_begin % kKvChunkKeys == 0,
           "unaligned split start: ", Show{it});
  f.expect(it.kv_end == last || it.kv_end % kKvChunkKeys == 0, "unaligned split end: ", Show{it});
  const bool split = it.merge >= 0;
  f.expect(split == (it.partial_row >= 0), "partial_row and merge disagree: ", Show{it});
  if (split) {
    f.expect(it.merge < p.header.num_merges &&
                 it.partial_row + it.tile_rows <= p.header.num_partial_rows,
             "partial block or merge out of range: ", Show{it});
  }
}

// Coverage and writers, per (request, KV head): a sweep over the row boundaries of its items and
// merge records; on each run of rows between boundaries the covering items' KV ranges must be
// disjoint and hold every key the run's rows see, and exactly one writer must own the run.
void check_coverage(const BatchPlanLimits& l, const Step& s, const Plan& p, Failure& f,
                    const std::vector<bool>& skip = {}) {
  const int64_t group = l.num_qo_heads / l.num_kv_heads;
  const int heads = l.num_kv_heads;
  std::vector<std::vector<int>> items(size_t(s.batch()) * heads), merges(items.size());
  for (size_t i = 0; i < p.items.size(); ++i) {
    const BatchWorkItem& it = p.items[i];
    if (it.request < 0 || it.request >= s.batch() || it.kv_head < 0 || it.kv_head >= heads) return;
    items[size_t(it.request) * heads + it.kv_head].push_back(int(i));
  }
  for (size_t m = 0; m < p.merges.size(); ++m) {
    const BatchMergeRecord& r = p.merges[m];
    if (!f.expect(r.request >= 0 && r.request < s.batch() && r.kv_head >= 0 && r.kv_head < heads,
                  "merge ", m, " out of range")) {
      return;
    }
    merges[size_t(r.request) * heads + r.kv_head].push_back(int(m));
  }
  std::vector<int64_t> bounds;
  std::vector<int> active, open_items, open_recs;
  for (int b = 0; b < s.batch() && !f.failed(); ++b) {
    if (!skip.empty() && skip[size_t(b)]) continue;
    const int64_t q = s.q_len(b), kv = s.kv[b], rows = q * group;
    for (int h = 0; h < heads && !f.failed(); ++h) {
      std::vector<int>& mine = items[size_t(b) * heads + h];
      std::vector<int>& recs = merges[size_t(b) * heads + h];
      bounds.assign({0, rows});
      for (int i : mine)
        bounds.push_back(p.items[i].row_begin), bounds.push_back(p.items[i].row_end);
      for (int m : recs)
        bounds.push_back(p.merges[m].row_begin), bounds.push_back(p.merges[m].row_end);
      std::sort(bounds.begin(), bounds.end());
      bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
      // Sweep: open the items and records starting at or before each run, drop the finished.
      std::sort(mine.begin(), mine.end(),
                [&](int a, int c) { return p.items[a].row_begin < p.items[c].row_begin; });
      std::sort(recs.begin(), recs.end(),
                [&](int a, int c) { return p.merges[a].row_begin < p.merges[c].row_begin; });
      size_t next_item = 0, next_rec = 0;
      open_items.clear();
      open_recs.clear();
      for (size_t k = 0; k + 1 < bounds.size() && !f.failed(); ++k) {
        const int64_t r0 = bounds[k], r1 = bounds[k + 1];
        if (r0 >= rows) break;
        while (next_item < mine.size() && p.items[mine[next_item]].row_begin <= r0) {
          open_items.push_back(mine[next_item++]);
        }
        while (next_rec < recs.size() && p.merges[recs[next_rec]].row_begin <= r0) {
          open_recs.push_back(recs[next_rec++]);
        }
        open_items.erase(std::remove_if(open_items.begin(), open_items.end(),
                                        [&](int i) { return p.items[i].row_end <= r0; }),
                         open_items.end());
        open_recs.erase(std::remove_if(open_recs.begin(), open_recs.end(),
                                       [&](int m) { return p.merges[m].row_end <= r0; }),
                        open_recs.end());
        active = open_items;
        std::sort(active.begin(), active.end(),
                  [&](int a, int c) { return p.items[a].kv_begin < p.items[c].kv_begin; });
        // Messages are built only on failure: this loop runs for every run of rows.
        auto fail = [&](const auto&... parts) {
          f.expect(false, "request ", b, " kv_head ", h, " rows [", r0, ", ", r1, "): ", parts...);
        };
        // Keys: the run's rows see [lo(first position), hi(last position)).
        const int64_t need_lo = row_keys(l, r0 / group, q, kv).lo;
        const int64_t need_hi = row_keys(l, (r1 - 1) / group, q, kv).hi;
        if (active.empty()) {
          fail("no item covers these rows");
          break;
        }
        int64_t covered = need_lo;
        for (size_t a = 0; a < active.size(); ++a) {
          const BatchWorkItem& it = p.items[active[a]];
          if (a > 0 && it.kv_begin < p.items[active[a - 1]].kv_end) {
            fail("overlapping keys of ", Show{p.items[active[a - 1]]}, " and ", Show{it});
          }
          if (it.kv_begin > covered && covered < need_hi) {
            fail("keys [", covered, ", ", it.kv_begin, ") not covered");
          }
          covered = std::max<int64_t>(covered, it.kv_end);
        }
        if (covered < need_hi) fail("keys [", covered, ", ", need_hi, ") not covered");
        // Writers: one direct item, or one merge record over exactly the split items.
        int direct = 0;
        for (int i : active) direct += p.items[i].merge < 0;
        const int records = static_cast<int>(open_recs.size());
        const int record = records == 1 ? open_recs[0] : -1;
        if (direct + records != 1) {
          fail(direct, " direct writers and ", records, " merge records");
          break;
        }
        if (direct == 1) {
          if (active.size() != 1) fail("a direct item shares its rows");
          continue;
        }
        const BatchMergeRecord& m = p.merges[record];
        if (m.num_splits != int(active.size()) || m.num_splits < 2 || m.num_splits > kMaxSplits) {
          fail("merge of ", m.num_splits, " splits over ", active.size(), " items");
        }
        for (size_t a = 0; a < active.size(); ++a) {
          const BatchWorkItem& it = p.items[active[a]];
          if (it.merge != record || it.row_begin != m.row_begin || it.row_end != m.row_end ||
              it.tile_rows != m.partial_stride || m.q_start != s.cu[b] ||
              it.partial_row != m.partial_row + int64_t(a) * m.partial_stride) {
            fail("split ", a, " (ascending keys) is not the merge's partial ", a, ": ", Show{it});
          }
        }
      }
    }
  }
}

// No two partial blocks overlap, and merge records own disjoint partial rows.
void check_partials(const Plan& p, Failure& f) {
  std::vector<std::pair<int64_t, int64_t>> blocks;
  for (const BatchWorkItem& it : p.items) {
    if (it.partial_row >= 0) blocks.emplace_back(it.partial_row, it.partial_row + it.tile_rows);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    f.expect(blocks[i].first >= blocks[i - 1].second, "partial blocks overlap at row ",
             blocks[i].first);
  }
  blocks.clear();
  for (const BatchMergeRecord& m : p.merges) {
    blocks.emplace_back(m.partial_row, m.partial_row + int64_t(m.num_splits) * m.partial_stride);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 0; i < blocks.size(); ++i) {
    f.expect(blocks[i].first >= (i ? blocks[i - 1].second : 0) &&
                 blocks[i].second <= p.header.num_partial_rows,
             "merge partial rows overlap or overflow at ", blocks[i].first);
  }
}

}  // namespace

// The concurrent form (BatchPlanLimits::concurrent_decodes): its runs hold exactly the step's
// decodes (consecutive requests of one q_len <= 16, in order), and its plan computes every
// prefill row's pairs exactly once from prefill items on the first prefill_ctas CTAs of each
// group, with no item of a decode.
void check_concurrent(const BatchPlanLimits& l, const Step& s, const BatchPlanInfo& info,
                      const unsigned char* base, Failure& f) {
  const BatchConcurrentForm& form = info.concurrent;
  const int group = l.num_qo_heads / l.num_kv_heads;
  std::vector<bool> decode(size_t(s.batch()), false);
  for (int b = 0; b < s.batch(); ++b) {
    decode[size_t(b)] = s.q_len(b) > 0 && decode_tile_rows(s.q_len(b) * group) > 0;
  }
  f.expect(
      form.prefill_ctas > 0 && l.concurrent_decodes != BatchOverlap::kOff && l.dv() == l.head_dim &&
          form.num_runs >= 1 && form.num_runs <= kMaxConcurrentDecodeRuns,
      "concurrent form against the limits: ", form.prefill_ctas, " CTAs, ", form.num_runs, " runs");
  std::vector<int> in_run(size_t(s.batch()), 0);
  for (int r = 0; r < form.num_runs && !f.failed(); ++r) {
    const BatchDecodeRun& run = form.runs[r];
    f.expect(run.begin < run.end && run.end <= s.batch() &&
                 (r == 0 || form.runs[r - 1].end <= run.begin) && run.q_len >= 1 &&
                 run.q_len <= kDecodeMaxQLen,
             "decode run ", r, " [", run.begin, ", ", run.end, ") of q_len ", run.q_len);
    for (int b = run.begin; b < run.end && !f.failed(); ++b) {
      f.expect(decode[size_t(b)] && s.q_len(b) == run.q_len, "request ", b, " in run ", r);
      ++in_run[size_t(b)];
    }
  }
  for (int b = 0; b < s.batch() && !f.failed(); ++b) {
    f.expect(in_run[size_t(b)] == (decode[size_t(b)] ? 1 : 0), "request ", b, " in ",
             in_run[size_t(b)], " runs");
  }
  if (f.failed()) return;
  const Plan p = read_plan(base + form.plan_offset);
  const BatchPlanHeader& h = p.header;
  f.expect(h.magic == kBatchPlanMagic && h.num_ctas == l.num_ctas && h.num_requests == s.batch() &&
               form.plan_end == form.plan_offset + h.used_bytes &&
               h.num_merges == form.num_merges && h.num_partial_rows == form.num_partial_rows &&
               h.num_decode_items == 0 &&
               (!form.tail || (l.concurrent_tail_milli > 0 && form.num_merges == 0)),
           "concurrent plan header");
  const int group_ctas = l.num_ctas / std::gcd(l.num_kv_heads, l.num_ctas);
  for (int c = 0; c < l.num_ctas && !f.failed(); ++c) {
    // The tail's (BatchPlanLimits::concurrent_tail_milli) later CTAs hold prefill items too.
    const bool prefill_cta = form.tail || c % group_ctas < form.prefill_ctas;
    for (int i = p.cta_offsets[size_t(c)]; i < p.cta_offsets[size_t(c) + 1] && !f.failed(); ++i) {
      const BatchWorkItem& it = p.items[size_t(i)];
      f.expect(prefill_cta && it.kind == uint16_t(BatchTileKind::kPrefill) &&
                   !decode[size_t(it.request)],
               "concurrent plan: CTA ", c, " holds ", Show{it});
      if (!f.failed()) check_item(l, s, p, it, f);
    }
  }
  if (!f.failed()) check_coverage(l, s, p, f, decode);
  if (!f.failed()) check_partials(p, f);
}

std::string verify(const BatchPlanLimits& l, const Step& s, const BatchPlanInfo& info,
                   const unsigned char* base) {
  const Plan p = read_plan(base);
  Failure f;
  check_layout(l, s, info, base, p, f);
  for (const BatchWorkItem& it : p.items) {
    if (f.failed()) break;
    check_item(l, s, p, it, f);
  }
  if (!f.failed()) check_coverage(l, s, p, f);
  if (!f.failed()) check_partials(p, f);
  if (!f.failed() && info.concurrent.prefill_ctas > 0) check_concurrent(l, s, info, base, f);
  return f.message();
}

std::string plan_and_verify(BatchPlanner& planner, const Step& s, Buffer& buf,
                            BatchPlanInfo* info_out) {
  buf.refill();
  BatchPlanInfo info;
  try {
    info = planner.plan(s.cu.data(), s.kv.data(), s.batch(), buf.data(), buf.usable());
  } catch (const std::exception& e) {
    return std::string("plan() threw: ") + e.what();  // a valid step: reported with its seed
  }
  if (info_out != nullptr) *info_out = info;
  return verify(planner.limits(), s, info, buf.data());
}

}  // namespace hopattn::plan::check
