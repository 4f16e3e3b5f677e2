// The fwd kernel's GPU tests on dense and varlen inputs: the odd-shape grids, longer sequences,
// masks and score options, head dims 64, 192x128 and 256, GQA packing, and an unsupported head
// dim. Each case goes through check_case() (fwd_kernel_check.cpp states the error bound); paged KV
// is in fwd_paged_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "fwd_kernel_check.hpp"
#include "hopattn/error.hpp"
#include "odd_shape_grid.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::fwd_check {
namespace {

// ---------------------------------------------------------------------------- odd-shape grid
// (dtype, batch, q_len, kv_len, causal, GQA variant): GQA 0 = 2 kv heads x 1, 1 = 1 x 5, 2 = 2 x 8.
class FwdKernelGrid : public ::testing::TestWithParam<OddShapeParam> {};

TEST_P(FwdKernelGrid, MatchesReference) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto [dtype, batch, q_len, kv_len, causal, gqa] = GetParam();
  check_case(
      dense_case(dtype, batch, q_len, kv_len, kOddGridKvHeads[gqa], kOddGridGroup[gqa], causal),
      test_seed());
}

INSTANTIATE_TEST_SUITE_P(OddShapes, FwdKernelGrid, odd_shape_values(), odd_shape_name);

// The same grid with GQA packing forced on and forced off (the grid above runs the heuristic's
// choice): q heads of one KV head sharing a tile (groups 5 and 8; MHA ignores the knob), with
// q_len 1 and 239, causal rows that see no key (q_len > kv_len).
class FwdKernelPackGrid : public ::testing::TestWithParam<OddShapeParam> {};

TEST_P(FwdKernelPackGrid, MatchesReference) {
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto [dtype, batch, q_len, kv_len, causal, gqa] = GetParam();
  FwdCase c =
      dense_case(dtype, batch, q_len, kv_len, kOddGridKvHeads[gqa], kOddGridGroup[gqa], causal);
  for (bool pack : {true, false}) {
    c.opts.pack_gqa = pack;
    check_case(c, test_seed());
  }
}

INSTANTIATE_TEST_SUITE_P(OddShapes, FwdKernelPackGrid, odd_shape_values(), odd_shape_name);

// ---------------------------------------------------------------------------- longer sequences
#define SKIP_WITHOUT_HOPPER() \
  if (auto why = skip_reason(); !why.empty()) GTEST_SKIP() << why

// Single tile, single KV block: the smallest complete path (run this one first when debugging).
TEST(FwdKernel, SingleTile) {
  SKIP_WITHOUT_HOPPER();
  check_case(dense_case(DType::kBF16, 1, 128, 128, 1, 1, false), test_seed());
}

// Many KV blocks: the 2-stage ring wraps several times; many m-blocks per head.
TEST(FwdKernel, ManyBlocksCausalAndFull) {
  SKIP_WITHOUT_HOPPER();
  for (bool causal : {false, true}) {
    check_case(dense_case(DType::kBF16, 1, 1031, 1031, 1, 2, causal), test_seed());
  }
  check_case(dense_case(DType::kFP16, 2, 300, 2000, 3, 1, false), test_seed());
}

// Causal calls the paired walk takes on a 132-SM device (plan/fwd_order.hpp: dense, an even
// m-block count and units that fill the grid's rounds within 4%): kv_len > q_len (1 unit x 264
// pairs), GQA packed (q_len 64: 2 m-blocks of 32 positions, 1 unit x 33 x 8 KV heads) and a
// window bounded on the right only (2 units x 11 x 12 heads, MHA so that no packing changes the
// count). Elsewhere they run the plain walk, checked all the same.
TEST(FwdKernel, PairedCausalWalk) {
  SKIP_WITHOUT_HOPPER();
  check_case(dense_case(DType::kBF16, 33, 250, 300, 1, 8, true), test_seed());
  check_case(dense_case(DType::kFP16, 33, 64, 700, 8, 4, true), test_seed());
  FwdCase w = dense_case(DType::kBF16, 11, 400, 520, 12, 1, false);  // MHA: no packing
  w.opts.window = {-1, 20};
  check_case(w, test_seed());
}

// The walk's L2 sections forced small (LaunchOptions::l2_section_kb; plan::fwd_section_bytes
// gives calls of equal tiles a 32nd of the L2): one KV group a section (1 KiB: no head's K/V
// fits), and two (300 KiB: a head's K/V is 600 keys x 256 bytes; 9 groups make sections of 2, 2,
// 2, 2 and 1), GQA 3 x 4 unpacked, full and causal, base and wide tiles, against the reference.
TEST(FwdKernel, SmallL2Sections) {
  SKIP_WITHOUT_HOPPER();
  using KVTiles = kernels::fwd::LaunchOptions::KVTiles;
  for (int kb : {1, 300}) {
    for (bool causal : {false, true}) {
      for (KVTiles tiles : {KVTiles::kBase, KVTiles::kWide}) {
        FwdCase c = dense_case(DType::kBF16, 3, 450, 600, 3, 4, causal);
        c.d = 64;
        c.opts.pack_gqa = false;
        c.launch.l2_section_kb = kb;
        c.launch.kv_tiles = tiles;
        check_case(c, test_seed());
      }
    }
  }
}

TEST(FwdKernel, LargeLogits) {
  SKIP_WITHOUT_HOPPER();
  FwdCase c = dense_case(DType::kBF16, 1, 257, 515, 2, 2, true);
  c.opts.scale = 1.0f;  // logits of standard deviation ~ 25
  check_case(c, test_seed());
}

TEST(FwdKernel, SlidingWindow) {
  SKIP_WITHOUT_HOPPER();
  FwdCase c = dense_case(DType::kBF16, 2, 700, 700, 1, 4, false);
  c.opts.window = {64, 16};
  check_case(c, test_seed());
  c.opts.causal = true;
  c.opts.window = {100, -1};
  check_case(c, test_seed());
  FwdCase shifted = dense_case(DType::kFP16, 1, 200, 600, 2, 1, false);
  shifted.opts.window = {130, 0};
  check_case(shifted, test_seed());
}

TEST(FwdKernel, Softcap) {
  SKIP_WITHOUT_HOPPER();
  FwdCase c = dense_case(DType::kBF16, 2, 333, 333, 2, 3, true);
  c.opts.softcap = 30.f;
  check_case(c, test_seed());
  c.opts.causal = false;
  c.opts.softcap = 5.f;
  c.qk_range = 4.0;  // logits well into the tanh's saturation
  check_case(c, test_seed());
}

TEST(FwdKernel, Sinks) {
  SKIP_WITHOUT_HOPPER();
  FwdCase c = dense_case(DType::kBF16, 2, 239, 113, 1, 4, true);  // some rows see no key
  c.sinks = true;
  check_case(c, test_seed());
}

TEST(FwdKernel, PackedQkvStrides) {
  SKIP_WITHOUT_HOPPER();
  FwdCase c = dense_case(DType::kFP16, 3, 190, 190, 2, 2, true);
  c.packed_qkv = true;
  check_case(c, test_seed());
}

// ---------------------------------------------------------------------------- varlen
TEST(FwdKernel, VarlenOddLengths) {
  SKIP_WITHOUT_HOPPER();
  // Lengths that end inside a 64-row slice, on it, on a 128-row tile, empty KV, q > kv.
  const std::vector<int> q_lens{1, 239, 64, 128, 17, 300, 5, 130};
  const std::vector<int> kv_lens{113, 1, 0, 128, 500, 300, 0, 257};
  for (bool causal : {false, true}) {
    check_case(varlen_case(DType::kBF16, q_lens, kv_lens, 1, 5, causal), test_seed());
    check_case(varlen_case(DType::kFP16, q_lens, kv_lens, 2, 1, causal), test_seed());
  }
}

// Tiles whose rows all lie in the first consumer's 64 with two or more KV blocks
// (FwdMainloop::compute_split: both consumer warpgroups take every other block, each with its own
// softmax state, merged through shared memory at the end): 2, 3 (odd: consumer 0 also takes the
// last), 6 and 8 blocks; GQA-packed rows (q_len x 4 <= 64); a window that leaves rows without a
// visible key in one consumer's blocks; softcap and sinks; NaN / Inf in the rows past every
// sequence's end.
TEST(FwdKernel, SplitTiles) {
  SKIP_WITHOUT_HOPPER();
  const std::vector<int> q_lens{1, 17, 64, 40, 3, 64};
  const std::vector<int> kv_lens{129, 256, 300, 700, 1000, 383};
  for (int d : {64, 128}) {
    FwdCase c = varlen_case(DType::kBF16, q_lens, kv_lens, 2, 1, true);
    c.d = d;
    c.poison_idle_requests = true;
    c.extra_kv_rows = 130;
    check_case(c, test_seed());
    c.opts.window = {150, 0};
    check_case(c, test_seed());
    FwdCase packed = varlen_case(DType::kBF16, {1, 16, 9}, {300, 129, 1000}, 2, 4, true);
    packed.d = d;
    check_case(packed, test_seed());
    FwdCase s = varlen_case(DType::kFP16, q_lens, kv_lens, 1, 1, false);
    s.d = d;
    s.opts.softcap = 20.f;
    s.opts.window = {200, 100};
    s.sinks = true;
    check_case(s, test_seed());
  }
}

TEST(FwdKernel, VarlenRandomBatch17) {
  SKIP_WITHOUT_HOPPER();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed ^ 0x5eed);
  std::uniform_int_distribution<int> q_len(1, 400), kv_len(0, 600);
  std::vector<int> q_lens(17), kv_lens(17);
  for (int b = 0; b < 17; ++b) {
    q_lens[b] = q_len(rng);
    kv_lens[b] = kv_len(rng) < 60 ? 0 : kv_len(rng);
  }
  FwdCase c = varlen_case(DType::kBF16, q_lens, kv_lens, 2, 8, true);
  c.sinks = true;
  check_case(c, seed);
  c.sinks = false;
  c.opts.causal = false;
  c.opts.window = {200, 50};
  check_case(c, seed);
}

TEST(FwdKernel, HeadDim64) {
  SKIP_WITHOUT_HOPPER();
  for (bool causal : {false, true}) {
    FwdCase c = dense_case(DType::kBF16, 17, 239, 113, 1, 5, causal);
    c.d = 64;
    check_case(c, test_seed());
    FwdCase f = dense_case(DType::kFP16, 1, 1, 1031, 2, 1, causal);
    f.d = 64;
    check_case(f, test_seed());
  }
  FwdCase v = varlen_case(DType::kBF16, {1, 239, 64, 130}, {113, 0, 500, 257}, 2, 4, true);
  v.d = 64;
  v.opts.softcap = 20.f;
  check_case(v, test_seed());
}

TEST(FwdKernel, HeadDim256And192x128) {
  SKIP_WITHOUT_HOPPER();
  for (bool causal : {false, true}) {
    FwdCase c = dense_case(DType::kBF16, 3, 239, 300, 1, 2, causal);
    c.d = 256;
    check_case(c, test_seed());
    FwdCase m = dense_case(DType::kFP16, 2, 239, 300, 2, 4, causal);
    m.d = 192;
    m.dv = 128;
    check_case(m, test_seed());
  }
  FwdCase v = varlen_case(DType::kBF16, {1, 239, 64, 130}, {113, 0, 500, 257}, 1, 3, true);
  v.d = 256;
  check_case(v, test_seed());
  v.d = 192;
  v.dv = 128;
  v.sinks = true;
  check_case(v, test_seed());
}

// ---------------------------------------------------------------------------- head dim 256
// Head dim 256 stages O in the Q buffer (80-key tiles; traits.cuh kOInQ): the next tile's Q may
// only land once the O stores have read it out, and tiles without visible keys write zeros
// without touching shared memory. Lengths around the 80-key block (79, 80, 81, 161), one row, q
// longer than kv (causal: whole tiles see no key), and every mask and score option.
TEST(FwdKernel, HeadDim256Options) {
  SKIP_WITHOUT_HOPPER();
  for (const auto& [q_len, kv_len] : {std::pair{1, 81}, std::pair{79, 80}, std::pair{161, 79},
                                      std::pair{700, 100}, std::pair{239, 1}}) {
    FwdCase c = dense_case(DType::kBF16, 2, q_len, kv_len, 2, 2, true);
    c.d = 256;
    check_case(c, test_seed());
  }
  FwdCase w = dense_case(DType::kFP16, 2, 333, 500, 1, 3, false);
  w.d = 256;
  w.opts.window = {100, 20};
  check_case(w, test_seed());
  w.opts.causal = true;
  w.opts.window = {170, -1};
  w.opts.softcap = 20.f;
  check_case(w, test_seed());
  FwdCase sinks = dense_case(DType::kBF16, 2, 400, 150, 2, 2, true);  // rows that see no key
  sinks.d = 256;
  sinks.sinks = true;
  check_case(sinks, test_seed());
}

// Several tiles per CTA (384 tiles on the 132 SMs of an H200): every CTA reloads Q over the O of
// its previous tile, MHA, GQA and GQA-packed, causal and not; every case also runs twice and must
// repeat bit for bit.
TEST(FwdKernel, HeadDim256ManyTilesPerCta) {
  SKIP_WITHOUT_HOPPER();
  FwdCase mha = dense_case(DType::kBF16, 3, 1000, 1000, 16, 1, true);
  mha.d = 256;
  check_case(mha, test_seed());
  FwdCase gqa = dense_case(DType::kFP16, 3, 1000, 600, 4, 4, false);
  gqa.d = 256;
  gqa.opts.pack_gqa = false;
  check_case(gqa, test_seed());
  gqa.dtype = DType::kBF16;
  gqa.opts.causal = true;
  gqa.opts.pack_gqa = true;  // 32 positions x 4 heads a tile: 32 m-blocks x 12 KV heads
  check_case(gqa, test_seed());
}

// Tiles without keys between tiles with keys in one CTA's sequence: requests alternate kv 0 and
// 300 (q 600: 5 m-blocks x 64 (request, head) pairs, one L2 section; CTA c takes tiles c,
// c + 132, c + 264, whose pairs are 4 apart: consecutive requests), so a CTA writes a zero tile
// while its producer may already load the next tile's Q, then computes that tile. The last tile
// of a request has 88 rows: its second consumer stores with plain stores from the staging rows.
// Causal: the first 300 rows of every request see no key either.
TEST(FwdKernel, HeadDim256EmptyTilesBetweenTiles) {
  SKIP_WITHOUT_HOPPER();
  std::vector<int> q_lens(16, 600), kv_lens(16);
  for (int b = 0; b < 16; ++b) kv_lens[b] = b % 2 == 0 ? 300 : 0;
  FwdCase c = varlen_case(DType::kBF16, q_lens, kv_lens, 4, 1, false);
  c.d = 256;
  check_case(c, test_seed());
  c.sinks = true;
  c.opts.causal = true;
  check_case(c, test_seed());
}

// ---------------------------------------------------------------------------- GQA packing
// Packed tiles hold floor(128 / group) q positions of every head of a group: groups that divide
// 64 store O by TMA boxes of (D, group, 64 / group), the others (3, 5, 6, 7, 12, 96, 128) with
// plain stores and some unused tile rows. Every case runs packed and unpacked.
void check_packed_and_unpacked(FwdCase c) {
  for (bool pack : {true, false}) {
    c.opts.pack_gqa = pack;
    check_case(c, test_seed());
  }
}

TEST(FwdKernelPackGqa, GroupSizes) {
  SKIP_WITHOUT_HOPPER();
  for (int group : {2, 3, 5, 6, 7, 8, 12, 16, 32, 64, 96, 128}) {
    // Large groups: fewer positions keep the CPU reference quick (a tile holds 1..4 of them).
    for (int q_len : group <= 16 ? std::vector<int>{1, 17, 239} : std::vector<int>{1, 5}) {
      check_packed_and_unpacked(dense_case(DType::kBF16, 2, q_len, 300, 1, group, true));
    }
  }
  check_packed_and_unpacked(dense_case(DType::kFP16, 3, 64, 1031, 2, 4, false));
}

// Chunked prefill / speculative verification: a few queries against a long cache, causal
// (bottom-right: the queries are the cache's last positions).
TEST(FwdKernelPackGqa, ShortQueriesLongCache) {
  SKIP_WITHOUT_HOPPER();
  for (int q_len : {1, 16, 64}) {
    check_packed_and_unpacked(dense_case(DType::kBF16, 2, q_len, 2000, 2, 4, true));
  }
  check_packed_and_unpacked(dense_case(DType::kBF16, 1, 7, 1500, 2, 6, true));
}

// The mask uses each row's q position (row / group): windows on both sides, causal with
// q_len > kv_len, softcap, and sinks per q head (the rows of a tile belong to different heads).
TEST(FwdKernelPackGqa, WindowSoftcapSinks) {
  SKIP_WITHOUT_HOPPER();
  for (int group : {5, 8}) {
    FwdCase w = dense_case(DType::kBF16, 2, 239, 700, 1, group, false);
    w.opts.window = {64, 16};
    check_packed_and_unpacked(w);
    FwdCase cw = dense_case(DType::kFP16, 1, 100, 600, 2, group, true);
    cw.opts.window = {130, -1};
    check_packed_and_unpacked(cw);
    FwdCase sc = dense_case(DType::kBF16, 2, 239, 113, 1, group, true);  // rows that see nothing
    sc.opts.softcap = 20.f;
    sc.sinks = true;
    check_packed_and_unpacked(sc);
  }
}

TEST(FwdKernelPackGqa, Varlen) {
  SKIP_WITHOUT_HOPPER();
  const std::vector<int> q_lens{1, 239, 64, 128, 17, 300, 5, 130, 0, 26};
  const std::vector<int> kv_lens{113, 1, 0, 128, 500, 300, 0, 257, 40, 20};
  for (int group : {5, 8}) {
    for (bool causal : {false, true}) {
      FwdCase c = varlen_case(DType::kBF16, q_lens, kv_lens, 2, group, causal);
      c.sinks = causal;
      check_packed_and_unpacked(c);
    }
  }
  FwdCase w = varlen_case(DType::kFP16, q_lens, kv_lens, 1, 7, false);
  w.opts.window = {50, 10};
  check_packed_and_unpacked(w);
}

TEST(FwdKernelPackGqa, HeadDims) {
  SKIP_WITHOUT_HOPPER();
  for (const auto& [d, dv] : {std::pair{64, 64}, std::pair{192, 128}, std::pair{256, 256}}) {
    for (int group : {5, 8}) {
      FwdCase c = dense_case(DType::kBF16, 2, 33, 300, 1, group, true);
      c.d = d;
      c.dv = dv;
      check_packed_and_unpacked(c);
      FwdCase v = varlen_case(DType::kFP16, {1, 239, 64, 130}, {113, 0, 500, 257}, 2, group, true);
      v.d = d;
      v.dv = dv;
      v.sinks = true;
      check_packed_and_unpacked(v);
    }
  }
}

// ---------------------------------------------------------------------------- unsupported
TEST(FwdKernel, UnsupportedHeadDimIsNotImplemented) {
  SKIP_WITHOUT_HOPPER();
  FwdCase c = dense_case(DType::kBF16, 1, 8, 8, 1, 1, false);
  c.d = 96;
  try {
    run_once(c);
    ADD_FAILURE() << "head dim 96 on CUDA did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotImplemented) << e.what();
  }
}

}  // namespace
}  // namespace hopattn::testing::fwd_check
