// The decode kernel's schedule (src/kernels/decode/schedule.cuh, compiled here as plain C++)
// against the reference visibility rule, on random problems: beams with shared prefixes and
// per-beam lengths, q_len 1..16 with causal or tree masks, windows, GQA groups, head dims (rows
// per CTA), page sizes and split counts. Walking every CTA's tiles and warp-group blocks exactly
// as the kernel does, it checks that
//   - every (query row, key) pair a query sees is attended exactly once (across row tiles,
//     splits, tiles and warp groups) and no other pair is,
//   - each key is read through the right page-table row (a beam's shared prefix through the
//     first beam's pages) and only keys in [0, kv_len) of that row are loaded (so evicted or
//     unused pages are never dereferenced),
//   - blocks the kernel treats as mask-free are visible to every row of the CTA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/decode/schedule.cuh"

namespace hopattn::kernels::decode {
namespace {

struct Problem {
  int requests = 1, width = 1, q_len = 1, group = 1, head_dim = 128, splits = 1, page_size = 16;
  bool causal = true, tree = false, shared_prefix = false;
  int left = -1, right = -1;
  std::vector<int32_t> kv_len;      // per page-table row
  std::vector<int32_t> shared_len;  // per request
  std::vector<uint8_t> tree_mask;   // [rows][q_len][q_len]
};

// DESIGN.md: bottom-right causal alignment; a tree mask replaces causality inside the draft
// (the last q_len keys); the window applies on top.
bool reference_visible(const Problem& p, int b, int i, int j) {
  const int kv = p.kv_len[b];
  if (j < 0 || j >= kv) return false;
  const int diag = i + kv - p.q_len;
  if (p.left >= 0 && j < diag - p.left) return false;
  if (p.right >= 0 && j > diag + p.right) return false;
  if (p.tree) {
    const int draft = kv - p.q_len;
    return j < draft || p.tree_mask[(size_t(b) * p.q_len + i) * p.q_len + (j - draft)] != 0;
  }
  return !p.causal || j <= diag;
}

Problem random_problem(std::mt19937_64& rng) {
  auto pick = [&](std::vector<int> v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Problem p;
  p.width = pick({1, 1, 2, 3, 4});
  p.shared_prefix = p.width > 1 || uniform(0, 3) == 0;
  p.requests = uniform(1, 3);
  p.q_len = pick({1, 1, 3, 4, 16});
  p.group = pick({1, 2, 5, 7, 8, 16});
  p.head_dim = pick({64, 128, 256});
  p.tree = uniform(0, 2) == 0;
  p.causal = uniform(0, 3) != 0;
  p.left = uniform(0, 2) == 0 ? uniform(0, 300) : -1;
  p.right = uniform(0, 4) == 0 ? uniform(0, 20) : -1;
  p.splits = pick({1, 1, 2, 3, 7, 64});
  p.page_size = uniform(1, 70);
  const int longest = pick({5, 70, 300, 1000});
  for (int r = 0; r < p.requests; ++r) {
    int shortest = longest;
    for (int w = 0; w < p.width; ++w) {
      const int len = uniform(0, 5) == 0 ? 0 : uniform(p.q_len, std::max(p.q_len, longest));
      p.kv_len.push_back(len);
      shortest = std::min(shortest, len);
    }
    p.shared_len.push_back(uniform(0, 3) == 0 ? shortest : uniform(0, shortest));
  }
  for (size_t i = 0; i < p.kv_len.size() * p.q_len * p.q_len; ++i) {
    p.tree_mask.push_back(uniform(0, 1));
  }
  return p;
}

// A page table for `prob` (page i of row b is b * 100000 + i, so a lookup names the row and slot
// it came from) and the Params both kernels' schedules read: lengths, masks, splits; beams and
// rows a CTA are the caller's. (A moved vector keeps its buffer: block_table stays valid.)
struct Setup {
  std::vector<int32_t> table;
  Params p{};
};

Setup setup_of(const Problem& prob) {
  const int max_len = *std::max_element(prob.kv_len.begin(), prob.kv_len.end());
  const int max_pages = (max_len + prob.page_size - 1) / prob.page_size + 1;
  const int table_rows = static_cast<int>(prob.kv_len.size());
  Setup s;
  s.table.resize(size_t(table_rows) * max_pages);
  for (int b = 0; b < table_rows; ++b) {
    for (int i = 0; i < max_pages; ++i) s.table[size_t(b) * max_pages + i] = b * 100000 + i;
  }
  Params& p = s.p;
  p.page_size = prob.page_size;
  p.page_div = FastDivisor::of(static_cast<uint32_t>(prob.page_size));
  p.block_table = s.table.data();
  p.bt_stride_row = max_pages;
  p.bt_stride_page = 1;
  p.max_pages = max_pages;
  p.kv_lens = prob.kv_len.data();
  p.kv_lens_stride = 1;
  p.mask.causal = prob.causal;
  p.mask.window_left = prob.left;
  p.mask.window_right = prob.right;
  p.q_len = prob.q_len;
  p.num_kv_heads = 1;
  p.group = prob.group;
  p.num_splits = prob.splits;
  return s;
}

// Runs the kernel's schedule over every CTA of `p`; returns an empty string or the first error.
std::string check_schedule(const Problem& prob) {
  Setup setup = setup_of(prob);
  const std::vector<int32_t>& table = setup.table;
  Params& p = setup.p;
  const int table_rows = static_cast<int>(prob.kv_len.size());
  // Without shared_kv_lens every row is its own request (the launch plan's beam_width is 1).
  const int width = prob.shared_prefix ? prob.width : 1;
  p.shared_kv_lens = prob.shared_prefix ? prob.shared_len.data() : nullptr;
  p.shared_stride = 1;
  p.beam_width = width;
  p.tree_mask = prob.tree ? prob.tree_mask.data() : nullptr;
  p.tree_stride[0] = int64_t(prob.q_len) * prob.q_len;
  p.tree_stride[1] = prob.q_len;
  p.tree_stride[2] = 1;
  p.rows_per_request = width * prob.q_len * prob.group;
  p.rows_per_cta = rows_per_cta_for(prob.head_dim, p.rows_per_request);
  p.row_tiles = (p.rows_per_request + p.rows_per_cta - 1) / p.rows_per_cta;
  set_divisors(p);
  const int groups = prob.head_dim == 256 ? kWarps / 2 : kWarps;
  const int requests = table_rows / width;

  for (int r = 0; r < requests; ++r) {
    std::vector<std::vector<int>> count(p.rows_per_request);
    for (int rt = 0; rt < p.row_tiles; ++rt) {
      const int row_begin = rt * p.rows_per_cta;
      const int rows_valid = std::min(p.rows_per_cta, p.rows_per_request - row_begin);
      for (int split = 0; split < p.num_splits; ++split) {
        CtaShared cs{};
        setup_cta(p, cs, r, row_begin, rows_valid, split);
        for (int t = 0; t < p.rows_per_cta; ++t) cs.rows[t] = row_mask(p, cs, r, row_begin + t);
        const int row_tiles_cta = p.rows_per_cta / kMmaRows;
        const int slice_keys = kTileTokens / (groups / row_tiles_cta);
        for (int k = 0; k < cs.tile_count; ++k) {
          const TileInfo tile = tile_info(cs, k);
          const int page_row = cs.seg_row[tile.segment];
          if (tile.start < 0 || tile.start >= tile.end || tile.end > prob.kv_len[page_row]) {
            return "tile loads keys [" + std::to_string(tile.start) + ", " +
                   std::to_string(tile.end) + ") of row " + std::to_string(page_row);
          }
          for (int key = tile.start; key < tile.end; ++key) {  // fetch_page's lookup
            const int index = static_cast<int>(
                FastDivisor::of(static_cast<uint32_t>(prob.page_size)).divide(uint32_t(key)));
            if (table[cs.seg_pages[tile.segment] + index] != page_row * 100000 + index) {
              return "page lookup of key " + std::to_string(key) + " reads the wrong entry";
            }
          }
          for (int group = 0; group < groups; ++group) {
            const int m_tile = group % row_tiles_cta;
            for (int kb = 0; kb < slice_keys / kBlockTokens; ++kb) {
              const int tb = (group / row_tiles_cta) * slice_keys + kb * kBlockTokens;
              const int key0 = tile.start + tb;
              if (key0 >= tile.end) break;
              const int key_last = key0 + kBlockTokens - 1;
              const bool masked = (tile.beam >= 0 && cs.beam_lo != cs.beam_hi) ||
                                  key0 < cs.full_lo || key_last > cs.full_hi ||
                                  key_last >= cs.draft_min || key_last >= tile.end;
              for (int g = 0; g < kMmaRows; ++g) {
                const int cta_row = m_tile * kMmaRows + g;
                const int row = row_begin + cta_row;
                if (row >= p.rows_per_request) continue;  // padding: never written
                const int w = row / (prob.q_len * prob.group);
                const int i = (row / prob.group) % prob.q_len;
                const int b = r * width + w;
                for (int key = key0; key < key0 + kBlockTokens; ++key) {
                  const bool seen =
                      !masked || (key < tile.end && key_visible(cs.rows[cta_row], key, tile.beam));
                  if (!seen) continue;
                  const std::string where = "row " + std::to_string(row) + " key " +
                                            std::to_string(key) + (masked ? "" : " (mask-free)");
                  if (!reference_visible(prob, b, i, key)) return "attends invisible " + where;
                  const int want_row =
                      prob.shared_prefix && key < prob.shared_len[r] ? r * width : b;
                  if (page_row != want_row) return "reads through the wrong row: " + where;
                  if (int(count[row].size()) <= key) count[row].resize(key + 1, 0);
                  ++count[row][key];
                }
              }
            }
          }
        }
      }
    }
    for (int row = 0; row < p.rows_per_request; ++row) {
      const int w = row / (prob.q_len * prob.group);
      const int i = (row / prob.group) % prob.q_len;
      const int b = r * width + w;
      for (int key = 0; key < prob.kv_len[b]; ++key) {
        const int got = key < int(count[row].size()) ? count[row][key] : 0;
        if (got != (reference_visible(prob, b, i, key) ? 1 : 0)) {
          return "row " + std::to_string(row) + " key " + std::to_string(key) + " attended " +
                 std::to_string(got) + " times";
        }
      }
    }
  }
  return {};
}

// The small-grid kernel's schedule (small_range; small_kernel.cuh walks each warp's blocks w,
// w + kWarps, ... of its split and looks each key's page up as small_fetch does) on a problem
// it takes (one beam, no tree mask, <= 16 rows): the same three properties.
std::string check_small_schedule(const Problem& prob) {
  Setup setup = setup_of(prob);
  const std::vector<int32_t>& table = setup.table;
  Params& p = setup.p;
  const int requests = static_cast<int>(prob.kv_len.size());
  p.beam_width = 1;
  p.rows_per_request = prob.q_len * prob.group;
  p.rows_per_cta = kMmaRows;
  p.row_tiles = 1;
  set_divisors(p);

  for (int r = 0; r < requests; ++r) {
    const int kv = prob.kv_len[r];
    std::vector<std::vector<int>> count(p.rows_per_request, std::vector<int>(kv + 16, 0));
    for (int split = 0; split < p.num_splits; ++split) {
      CtaShared cs{};
      cs.kv_len[0] = kv;
      for (int w = 0; w < kWarps; ++w) {
        const SmallRange range = small_range(p, r, split, w, prob.kv_len[r]);
        if (range.kv_len != kv) return "kv_len " + std::to_string(range.kv_len);
        for (int i = 0; i < range.blocks; ++i) {
          const int key0 = range.warp_first + i * (kWarps * kBlockTokens);
          const int key_last = key0 + kBlockTokens - 1;
          if (key0 < range.lo || key0 >= range.hi || range.hi > kv || range.lo < 0) {
            return "block at key " + std::to_string(key0) + " outside its split [" +
                   std::to_string(range.lo) + ", " + std::to_string(range.hi) + ")";
          }
          const bool masked =
              key0 < range.full_lo || key_last > range.full_hi || key_last >= range.hi;
          for (int key = key0; key <= key_last && key < range.hi; ++key) {  // small_fetch
            const int index = static_cast<int>(p.page_div.divide(static_cast<uint32_t>(key)));
            if (table[range.pages + index * p.bt_stride_page] != r * 100000 + index) {
              return "page lookup of key " + std::to_string(key) + " reads the wrong entry";
            }
          }
          for (int row = 0; row < p.rows_per_request; ++row) {
            const RowMask m = row_mask(p, cs, r, row);
            const int i_tok = row / prob.group;
            for (int key = key0; key <= key_last; ++key) {
              const bool seen = !masked || (key < range.hi && key_visible(m, key, -1));
              if (!seen) continue;
              const std::string where = "row " + std::to_string(row) + " key " +
                                        std::to_string(key) + (masked ? "" : " (mask-free)");
              if (!reference_visible(prob, r, i_tok, key)) return "attends invisible " + where;
              ++count[row][key];
            }
          }
        }
      }
    }
    for (int row = 0; row < p.rows_per_request; ++row) {
      for (int key = 0; key < kv; ++key) {
        const int want = reference_visible(prob, r, row / prob.group, key) ? 1 : 0;
        if (count[row][key] != want) {
          return "row " + std::to_string(row) + " key " + std::to_string(key) + " attended " +
                 std::to_string(count[row][key]) + " times";
        }
      }
    }
  }
  return {};
}

TEST(DecodeSchedule, SmallGridKernelEveryVisibleKeyExactlyOnce) {
  std::mt19937_64 rng(20261205);
  int checked = 0;
  for (int iter = 0; checked < 400; ++iter) {
    Problem p = random_problem(rng);
    // What the small-grid kernel takes: one beam, no tree mask, <= 16 rows a request.
    p.width = 1;
    p.shared_prefix = false;
    p.tree = false;
    if (p.q_len * p.group > 16) continue;
    p.kv_len.resize(p.requests);
    ++checked;
    const std::string error = check_small_schedule(p);
    ASSERT_TRUE(error.empty()) << "problem " << iter << " (q_len " << p.q_len << ", group "
                               << p.group << ", splits " << p.splits << ", page " << p.page_size
                               << ", causal " << p.causal << ", window " << p.left << "/" << p.right
                               << "): " << error;
  }
}

TEST(DecodeSchedule, EveryVisibleKeyExactlyOnce) {
  std::mt19937_64 rng(20261129);
  for (int iter = 0; iter < 600; ++iter) {
    const Problem p = random_problem(rng);
    const std::string error = check_schedule(p);
    ASSERT_TRUE(error.empty()) << "problem " << iter << " (beams " << p.width << ", q_len "
                               << p.q_len << ", group " << p.group << ", D " << p.head_dim
                               << ", splits " << p.splits << ", page " << p.page_size << ", tree "
                               << p.tree << ", causal " << p.causal << ", window " << p.left << "/"
                               << p.right << "): " << error;
  }
}

TEST(DecodeSchedule, RowsPerCta) {
  EXPECT_EQ(rows_per_cta_for(128, 1), 16);
  EXPECT_EQ(rows_per_cta_for(128, 17), 32);
  EXPECT_EQ(rows_per_cta_for(128, 33), 64);
  EXPECT_EQ(rows_per_cta_for(128, 2048), 64);
  EXPECT_EQ(rows_per_cta_for(256, 48), 32);  // warp pairs: two row tiles at most
  EXPECT_EQ(rows_per_cta_for(64, 5), 16);
}

}  // namespace
}  // namespace hopattn::kernels::decode
