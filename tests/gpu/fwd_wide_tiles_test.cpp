// The fwd kernel's wide-KV-tile instances (kernels/fwd/configs.hpp kFwdWideConfigs: 192 keys at
// head dim 64, 176 keys with O staged in Q at head dim 128) against the CPU reference. The
// automatic rule runs them on long sequences only, so every case here forces them
// (LaunchOptions::kv_tiles = kWide) on the odd shapes and around their block sizes; the rule's
// choice itself is checked on the call's tensors at the end.
#include <gtest/gtest.h>

#include <vector>

#include "fwd_kernel_check.hpp"
#include "odd_shape_grid.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::fwd_check {
namespace {

#define SKIP_WITHOUT_HOPPER() \
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why

using KVTiles = kernels::fwd::LaunchOptions::KVTiles;
constexpr int kWideHeadDims[] = {64, 128};

FwdCase wide(FwdCase c, int d) {
  c.d = d;
  c.launch.kv_tiles = KVTiles::kWide;
  return c;
}

// ---------------------------------------------------------------------------- odd-shape grid
class FwdWideTilesGrid : public ::testing::TestWithParam<OddShapeParam> {};

TEST_P(FwdWideTilesGrid, MatchesReference) {
  SKIP_WITHOUT_HOPPER();
  const auto [dtype, batch, q_len, kv_len, causal, gqa] = GetParam();
  for (int d : kWideHeadDims) {
    check_case(wide(dense_case(dtype, batch, q_len, kv_len, kOddGridKvHeads[gqa],
                               kOddGridGroup[gqa], causal),
                    d),
               test_seed());
  }
}

INSTANTIATE_TEST_SUITE_P(OddShapes, FwdWideTilesGrid, odd_shape_values(), odd_shape_name);

// ---------------------------------------------------------------------------- block edges
// Key counts one short of, on and one past one and two blocks (176 / 192), and several blocks
// with q shorter and longer than kv (causal: whole tiles see no key; the paired walk at 33
// requests).
TEST(FwdWideTiles, BlockEdges) {
  SKIP_WITHOUT_HOPPER();
  for (int d : kWideHeadDims) {
    for (int kv : {175, 176, 177, 191, 192, 193, 352, 385, 1031}) {
      check_case(wide(dense_case(DType::kBF16, 2, 130, kv, 2, 1, true), d), test_seed());
    }
    check_case(wide(dense_case(DType::kFP16, 3, 1000, 1000, 4, 1, false), d), test_seed());
    check_case(wide(dense_case(DType::kBF16, 3, 1000, 600, 2, 4, true), d), test_seed());
    check_case(wide(dense_case(DType::kBF16, 33, 250, 300, 1, 8, true), d), test_seed());
  }
}

// Varlen: sequences ending inside a block, empty KV, q > kv, and NaN / Inf rows in the idle
// requests and after the last one, which a tile's last block reads and must zero.
TEST(FwdWideTiles, VarlenNeighbourNaNInf) {
  SKIP_WITHOUT_HOPPER();
  const std::vector<int> q_lens{100, 0, 77, 0, 130, 1, 0, 239};
  const std::vector<int> kv_lens{113, 64, 50, 200, 129, 1, 7, 500};
  for (int d : kWideHeadDims) {
    for (bool causal : {false, true}) {
      FwdCase c = wide(varlen_case(DType::kBF16, q_lens, kv_lens, 2, 4, causal), d);
      c.poison_idle_requests = true;
      c.extra_kv_rows = 200;
      check_case(c, test_seed());
    }
  }
}

// Tiles without keys between tiles with keys in one CTA's walk: at 176 keys O is staged in Q,
// so a zero tile's writes and the next tile's Q load meet as at head dim 256.
TEST(FwdWideTiles, EmptyTilesBetweenTiles) {
  SKIP_WITHOUT_HOPPER();
  std::vector<int> q_lens(16, 600), kv_lens(16);
  for (int b = 0; b < 16; ++b) kv_lens[b] = b % 2 == 0 ? 300 : 0;
  for (int d : kWideHeadDims) {
    FwdCase c = wide(varlen_case(DType::kBF16, q_lens, kv_lens, 4, 1, false), d);
    check_case(c, test_seed());
    c.sinks = true;
    c.opts.causal = true;
    check_case(c, test_seed());
  }
}

// Every mask and score option, GQA packed and not, strided q / k / v of one buffer.
TEST(FwdWideTiles, MasksAndOptions) {
  SKIP_WITHOUT_HOPPER();
  for (int d : kWideHeadDims) {
    FwdCase w = wide(dense_case(DType::kBF16, 2, 700, 900, 2, 2, false), d);
    w.opts.window = {200, 50};
    check_case(w, test_seed());
    w.opts.window = {-1, 20};
    check_case(w, test_seed());
    w.opts.window = {300, -1};
    w.opts.softcap = 30.f;
    check_case(w, test_seed());
    FwdCase s = wide(dense_case(DType::kFP16, 3, 239, 513, 2, 5, true), d);
    s.sinks = true;
    check_case(s, test_seed());
    FwdCase big = wide(dense_case(DType::kBF16, 1, 257, 515, 2, 2, true), d);
    big.opts.scale = 1.0f;  // logits of standard deviation ~ 25
    check_case(big, test_seed());
    for (bool pack : {true, false}) {
      FwdCase g = wide(dense_case(DType::kBF16, 4, 16, 1000, 2, 8, true), d);
      g.opts.pack_gqa = pack;
      check_case(g, test_seed());
    }
    FwdCase p = wide(dense_case(DType::kBF16, 2, 300, 300, 2, 2, true), d);
    p.packed_qkv = true;
    check_case(p, test_seed());
  }
}

// The automatic choice's causal cases: 192-row tiles on a dense call, walked as the host's replay
// (plan/fwd_walk_replay.hpp) picks: 132 requests x 2 m-blocks (one round of pairs on a 132-SM
// card), a long single request (16 heads, 6144: the replay pairs it), and 2 x 4 GQA unpacked,
// against the reference.
TEST(FwdWideTiles, PairedCausalWalk) {
  SKIP_WITHOUT_HOPPER();
  FwdCase c = dense_case(DType::kBF16, 132, 384, 384, 1, 1, true);
  c.d = 64;
  EXPECT_TRUE(runs_wide_tiles(c));
  check_case(c, test_seed());
  FwdCase l = dense_case(DType::kBF16, 1, 6144, 6144, 16, 1, true);
  l.d = 64;
  EXPECT_TRUE(runs_wide_tiles(l));
  check_case(l, test_seed());
  FwdCase g = dense_case(DType::kFP16, 66, 384, 384, 2, 4, true);  // 2 x 4 GQA, unpacked rows
  g.d = 64;
  g.opts.pack_gqa = false;
  check_case(g, test_seed());
}

// The walk forced (LaunchOptions::walk, the benchmark's --fwd-walk): paired over odd m-block
// counts (one empty m-block a pair), over a causal window and a full mask, and plain where the
// rule would pair; 192-row and base tiles alike.
TEST(FwdWideTiles, ForcedWalks) {
  SKIP_WITHOUT_HOPPER();
  using Walk = kernels::fwd::LaunchOptions::Walk;
  for (KVTiles tiles : {KVTiles::kWide, KVTiles::kBase}) {
    FwdCase c = dense_case(DType::kBF16, 5, 600, 600, 2, 2, true);  // 192 rows: 4 m-blocks
    c.d = 64;
    c.launch.kv_tiles = tiles;
    c.launch.walk = Walk::kPaired;
    check_case(c, test_seed());
    c.q_lens.assign(5, 700);  // 192 rows: 4; 128 rows: 6
    c.kv_lens.assign(5, 700);
    check_case(c, test_seed());
    c.q_lens.assign(5, 500);  // 192 rows: 3, odd; 128 rows: 4
    c.kv_lens.assign(5, 900);
    check_case(c, test_seed());
    c.opts.window = {200, 0};
    check_case(c, test_seed());
    c.opts.window = {-1, -1};
    c.opts.causal = false;
    check_case(c, test_seed());
    c.launch.walk = Walk::kPlain;
    c.opts.causal = true;
    check_case(c, test_seed());
  }
  FwdCase h = dense_case(DType::kFP16, 3, 333, 333, 2, 4, true);  // 128 rows: 3 m-blocks, odd
  h.launch.kv_tiles = KVTiles::kWide;                             // 176-key tiles at head dim 128
  h.launch.walk = Walk::kPaired;
  check_case(h, test_seed());
}

// ---------------------------------------------------------------------------- the choice
// kAuto (plan/fwd_tiles.hpp): head dim 64 from any length, causal only for dense calls (varlen
// lengths the host does not see keep the base tiles);
// head dim 128 from 16384 keys or a window's span; never for paged K/V or head dims without a
// wide row, even when forced; kBase never.
TEST(FwdWideTiles, AutomaticChoice) {
  SKIP_WITHOUT_HOPPER();
  FwdCase c = dense_case(DType::kBF16, 2, 100, 50, 1, 1, false);
  c.d = 64;
  EXPECT_TRUE(runs_wide_tiles(c));
  c.launch.kv_tiles = KVTiles::kBase;
  EXPECT_FALSE(runs_wide_tiles(c));
  c.launch.kv_tiles = KVTiles::kAuto;
  c.opts.causal = true;
  EXPECT_TRUE(runs_wide_tiles(c));  // dense causal: the replay picks the walk
  c.opts.window = {64, 0};
  EXPECT_TRUE(runs_wide_tiles(c));  // bounded on the left: no growth
  FwdCase vc = varlen_case(DType::kBF16, {300, 700}, {300, 700}, 1, 1, true);
  vc.d = 64;
  EXPECT_FALSE(runs_wide_tiles(vc));  // varlen causal: base tiles
  vc.opts.causal = false;
  EXPECT_TRUE(runs_wide_tiles(vc));

  FwdCase h = dense_case(DType::kBF16, 1, 128, 16384, 1, 1, true);
  EXPECT_TRUE(runs_wide_tiles(h));
  h.opts.window = {1024, 0};
  EXPECT_FALSE(runs_wide_tiles(h));  // 1152 keys a tile
  h.opts.window = {-1, -1};
  h.kv_lens = {16383};
  EXPECT_FALSE(runs_wide_tiles(h));
  h.launch.kv_tiles = KVTiles::kWide;
  EXPECT_TRUE(runs_wide_tiles(h));
  h.d = 256;
  EXPECT_FALSE(runs_wide_tiles(h));
  FwdCase v = varlen_case(DType::kBF16, {5, 100}, {4000, 17000}, 1, 1, true);
  EXPECT_TRUE(runs_wide_tiles(v));  // max_seqlen_k 17000 at head dim 128
  v.page_size = 16;
  v.launch.kv_tiles = KVTiles::kWide;
  EXPECT_FALSE(runs_wide_tiles(v));
}

}  // namespace
}  // namespace hopattn::testing::fwd_check
