// The fwd kernel with a paged KV cache, and with K/V rows past a sequence's end that hold NaN
// and Inf, against the CPU reference (same check as fwd_kernel_check.cpp: error within 2x a plain
// 16-bit attention's, NaN never, poisoned outputs, bitwise reruns).
//
// Paged cases cover both loaders: TMA boxes when gcd(page_size, kBlockN) is a multiple of 8
// (16, 64, 24, 256 with 128-key tiles), the cp.async gather otherwise (1, 13). Pages are
// relabelled by a random permutation, and every slot that holds no token is NaN, so a loader that
// reads the tail of a request's last page (or trusts block-table entries past the length) fails.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "fwd_kernel_check.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::fwd_check {
namespace {

#define SKIP_WITHOUT_HOPPER() \
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why

// Lengths with an empty cache, a single key, q_len > kv_len (causal rows that see nothing),
// tails inside a page and a tile, several tiles.
const std::vector<int> kQLens{1, 239, 17, 130, 64, 5};
const std::vector<int> kKVLens{0, 113, 1, 300, 257, 200};

FwdCase paged_case(int page_size, KVLayout layout, bool csr, int hkv, int group, bool causal) {
  FwdCase c = varlen_case(DType::kBF16, kQLens, kKVLens, hkv, group, causal);
  c.page_size = page_size;
  c.layout = layout;
  c.csr = csr;
  return c;
}

// ---------------------------------------------------------------------------- loader choice
// The windowed tensor maps (kv_loader.cuh) are accepted by the driver: otherwise varlen falls
// back to the plain maps and paged TMA to the gather, which the other tests would not notice.
TEST(FwdKVLoadPath, TmaWherePossible) {
  SKIP_WITHOUT_HOPPER();
  EXPECT_EQ(kv_load_path(dense_case(DType::kBF16, 2, 100, 100, 1, 1, false)), "contiguous");
  EXPECT_EQ(kv_load_path(varlen_case(DType::kBF16, {3, 5}, {7, 9}, 1, 1, false)), "contiguous");
  EXPECT_EQ(kv_load_path(paged_case(16, KVLayout::kNHD, false, 2, 1, true)),
            "paged TMA, boxes of 16 slots");
  EXPECT_EQ(kv_load_path(paged_case(64, KVLayout::kHND, true, 2, 1, true)),
            "paged TMA, boxes of 64 slots");
  EXPECT_EQ(kv_load_path(paged_case(256, KVLayout::kNHD, false, 2, 1, true)),
            "paged TMA, boxes of 128 slots");
  EXPECT_EQ(kv_load_path(paged_case(13, KVLayout::kNHD, false, 2, 1, true)), "paged gather");
  FwdCase hd256 = paged_case(64, KVLayout::kNHD, false, 2, 1, true);
  hd256.d = 256;
  EXPECT_EQ(kv_load_path(hd256), "paged TMA, boxes of 16 slots");
}

// A pool at the very start of its allocation (where a framework's allocator puts a cache): the page
// maps are based at the pool itself, so such pools keep TMA (an earlier windowed map based before
// the pool faulted there once a box held rows past a request's end).
TEST(FwdKVLoadPath, PoolAtAllocationStartTakesTma) {
  SKIP_WITHOUT_HOPPER();
  for (int page_size : {16, 64, 256}) {
    FwdCase c = paged_case(page_size, KVLayout::kNHD, false, 2, 1, true);
    c.pool_at_allocation_start = true;
    EXPECT_EQ(kv_load_path(c),
              "paged TMA, boxes of " + std::to_string(std::gcd(page_size, 128)) + " slots")
        << "page size " << page_size;
  }
}

// The case that faulted with the earlier windowed page maps (based before the pool): large
// pools, requests whose last KV block is partial (kv_len 8193: one key in the last block),
// decode-like q_len 1 with GQA packing; both placements of the pools, both layouts.
TEST(FwdPaged, LargePoolsWithPartialLastBlocks) {
  SKIP_WITHOUT_HOPPER();
  for (bool at_start : {true, false}) {
    for (int page_size : {16, 128}) {
      FwdCase c = varlen_case(DType::kBF16, {1, 1, 1}, {8193, 8193, 4097}, 2, 4, true);
      c.page_size = page_size;
      c.layout = page_size == 16 ? KVLayout::kNHD : KVLayout::kHND;
      c.pool_at_allocation_start = at_start;
      check_case(c, test_seed());
    }
  }
}

// The launch variant the benchmark can time against the default (hopattn bench fwd
// --paged-tma off): the gather for every page size; varlen is unaffected.
TEST(FwdKVLoadPath, PagedTmaTurnedOff) {
  SKIP_WITHOUT_HOPPER();
  kernels::fwd::LaunchOptions plain;
  plain.paged_tma = false;
  EXPECT_EQ(kv_load_path(dense_case(DType::kBF16, 2, 100, 100, 1, 1, false), plain), "contiguous");
  EXPECT_EQ(kv_load_path(varlen_case(DType::kBF16, {3, 5}, {7, 9}, 1, 1, false), plain),
            "contiguous");
  EXPECT_EQ(kv_load_path(paged_case(16, KVLayout::kNHD, false, 2, 1, true), plain), "paged gather");
  EXPECT_EQ(kv_load_path(paged_case(64, KVLayout::kHND, true, 2, 1, true), plain), "paged gather");
}

// ---------------------------------------------------------------------------- out-of-range rows
// Varlen: the requests with q_len 0 sit between the others and hold NaN in K and Inf in V, and
// rows after the last request do too; every tile whose sequence ends inside its last KV block
// reads such rows, which must arrive as zeros.
TEST(FwdOutOfRangeRows, VarlenNeighbourNaNInf) {
  SKIP_WITHOUT_HOPPER();
  const std::vector<int> q_lens{100, 0, 77, 0, 130, 1, 0, 239};
  const std::vector<int> kv_lens{113, 64, 50, 200, 129, 1, 7, 300};
  for (bool causal : {false, true}) {
    FwdCase c = varlen_case(DType::kBF16, q_lens, kv_lens, 2, 4, causal);
    c.poison_idle_requests = true;
    c.extra_kv_rows = 200;
    check_case(c, test_seed());
  }
  FwdCase w = varlen_case(DType::kFP16, q_lens, kv_lens, 1, 5, false);
  w.poison_idle_requests = true;
  w.extra_kv_rows = 200;
  w.opts.window = {40, 10};
  w.opts.softcap = 20.f;
  check_case(w, test_seed());
}

// Every built head dim: the tail maps are per configuration (kBlockN 128, 112, 80).
TEST(FwdOutOfRangeRows, VarlenNeighbourNaNInfHeadDims) {
  SKIP_WITHOUT_HOPPER();
  const std::vector<int> q_lens{100, 0, 77, 0, 61};
  const std::vector<int> kv_lens{113, 64, 50, 200, 129};
  for (const auto& [d, dv] : {std::pair{64, 64}, std::pair{192, 128}, std::pair{256, 256}}) {
    FwdCase c = varlen_case(DType::kBF16, q_lens, kv_lens, 2, 2, true);
    c.d = d;
    c.dv = dv;
    c.poison_idle_requests = true;
    c.extra_kv_rows = 130;
    check_case(c, test_seed());
  }
}

// ---------------------------------------------------------------------------- paged grid
// (page_size, layout, CSR, GQA variant): GQA 0 = 2 kv heads x 1, 1 = 1 x 5, 2 = 2 x 8.
using PagedParam = std::tuple<int, KVLayout, bool, int>;

class FwdPagedGrid : public ::testing::TestWithParam<PagedParam> {};

TEST_P(FwdPagedGrid, MatchesReference) {
  SKIP_WITHOUT_HOPPER();
  const auto [page_size, layout, csr, gqa] = GetParam();
  constexpr int kHkv[] = {2, 1, 2}, kGroup[] = {1, 5, 8};
  for (bool causal : {false, true}) {
    check_case(paged_case(page_size, layout, csr, kHkv[gqa], kGroup[gqa], causal), test_seed());
  }
}

std::string paged_name(const ::testing::TestParamInfo<PagedParam>& info) {
  constexpr const char* kGqa[] = {"mha", "gqa5", "gqa8"};
  const PagedParam& p = info.param;
  return "ps" + std::to_string(std::get<0>(p)) +
         (std::get<1>(p) == KVLayout::kNHD ? "_nhd" : "_hnd") +
         (std::get<2>(p) ? "_csr_" : "_table_") + kGqa[std::get<3>(p)];
}

INSTANTIATE_TEST_SUITE_P(PageSizes, FwdPagedGrid,
                         ::testing::Combine(::testing::Values(1, 16, 64, 13),
                                            ::testing::Values(KVLayout::kNHD, KVLayout::kHND),
                                            ::testing::Bool(), ::testing::Values(0, 1, 2)),
                         paged_name);

// ---------------------------------------------------------------------------- paged extras
// Page sizes whose TMA boxes are smaller or larger than one page piece: 8-row boxes (24), a page
// longer than the tile (256), and the smallest multiple of 8 (8). 3 and 7: the gather with a
// block's page ids staged in shared memory (pages below 8 tokens, KVLoader::block_page_ids),
// pages straddling the blocks' edges.
TEST(FwdPaged, OtherPageSizes) {
  SKIP_WITHOUT_HOPPER();
  for (int page_size : {8, 24, 256, 3, 7}) {
    check_case(paged_case(page_size, KVLayout::kNHD, false, 2, 4, true), test_seed());
    check_case(paged_case(page_size, KVLayout::kHND, true, 1, 3, false), test_seed());
  }
}

// Other head dims (kBlockN 128, 112, 80): TMA for 16 and 64 (boxes of 16 or 64 rows), the
// gather for 13 and 5 (5: page ids staged where 16 pages are less than a block, kBlockN 128 and
// 112, read per row at 80).
TEST(FwdPaged, HeadDims) {
  SKIP_WITHOUT_HOPPER();
  for (const auto& [d, dv] : {std::pair{64, 64}, std::pair{192, 128}, std::pair{256, 256}}) {
    for (int page_size : {16, 64, 13, 5}) {
      FwdCase c = paged_case(page_size, page_size == 64 ? KVLayout::kHND : KVLayout::kNHD,
                             page_size == 13, 2, 2, true);
      c.d = d;
      c.dv = dv;
      check_case(c, test_seed());
    }
  }
}

TEST(FwdPaged, WindowSoftcapSinksFp16) {
  SKIP_WITHOUT_HOPPER();
  for (int page_size : {16, 13}) {
    FwdCase c = paged_case(page_size, KVLayout::kNHD, false, 2, 3, false);
    c.dtype = DType::kFP16;
    c.opts.window = {70, 5};
    c.opts.softcap = 15.f;
    c.sinks = true;
    check_case(c, test_seed());
  }
}

// GQA packing forced on and off with both paged loaders (TMA boxes for 16, the gather for 13)
// and groups whose output goes by TMA (8) or by plain stores (5, 6).
TEST(FwdPaged, PackGqa) {
  SKIP_WITHOUT_HOPPER();
  for (int page_size : {16, 13}) {
    for (int group : {5, 6, 8}) {
      FwdCase c = paged_case(page_size, page_size == 16 ? KVLayout::kHND : KVLayout::kNHD,
                             page_size == 13, 2, group, true);
      c.sinks = group == 6;
      for (bool pack : {true, false}) {
        c.opts.pack_gqa = pack;
        check_case(c, test_seed());
      }
    }
  }
}

// Many KV blocks per tile (the ring wraps several times) and many requests.
TEST(FwdPaged, LongAndMany) {
  SKIP_WITHOUT_HOPPER();
  for (int page_size : {64, 1}) {
    FwdCase c = varlen_case(DType::kBF16, {1031, 300, 1}, {2000, 1031, 1500}, 2, 4, true);
    c.page_size = page_size;
    check_case(c, test_seed());
  }
}

}  // namespace
}  // namespace hopattn::testing::fwd_check
