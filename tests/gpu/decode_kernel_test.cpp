// The decode kernel (src/kernels/decode) through the public hopattn::decode against the CPU
// reference (double precision, fp32 output) on fresh seeded random data. Problems come from the
// shared decode builder (tests/cpu/decode_case.hpp): poisoned unused pages, slots and block-table
// entries (a read past kv_len or through a wrong page shows up as NaN), strided block tables,
// every KV dtype with per-tensor and per-head scales. Outputs are poisoned (0xff) first. The
// workspace is garbage except for its zeroed semaphore area (the zero-once contract: nothing else
// may be relied on), and every case runs twice on it without a reset: the first result against
// the reference, the second bitwise equal to the first, the semaphores back at zero after each
// (a counter left non-zero would elect the wrong last block and merge missing partials).
//
// Error bounds. Inputs are exact in both computations (16-bit q and V, 8-bit KV dequantized
// exactly to q's dtype, scales applied in fp32); the kernel rounds P to q's dtype before PV and
// rounds the output. With u the unit roundoff of q's dtype (bf16 2^-8, fp16 2^-11) and vmax the
// largest |real V|: |o - o_exact| <= u * vmax (P rounding: sum |p~ - p| |v| / l) + u * vmax
// (output rounding), which is what a plain 16-bit implementation (fp32 softmax, 16-bit P, fp32
// accumulation, 16-bit output) achieves too. The bound used is twice that: 4 u vmax (bf16 with
// the builder's |v| <= 2: 3.1e-2). 8-bit KV also meets relative L2 <= 2e-2 (the bound),
// lse |err| <= 1e-3 (-inf must match exactly), and NaN never passes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "api/validate.hpp"
#include "cpu/decode_case.hpp"
#include "decode_upload.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"
#include "kernels/decode/launch.hpp"
#include "reference/reference.hpp"

namespace hopattn::testing {
namespace {

using decode_case::DecodeCase;
using decode_case::ScaleKind;

struct KernelCase {
  std::string name;
  DecodeCase c;
  int num_splits = 0;  // 0: the library's heuristic
  int config = 0;      // CTAs per SM the kernel is built for (LaunchPlan::config); 0: the plan's
  int small = -1;      // DecodeOptions::kernel: 2 kNarrow, 1 kSmall, 0 kTiles, -1 kAuto
};

void PrintTo(const KernelCase& c, std::ostream* os) { *os << c.name; }

// Defaults: 17 requests, one new token, GQA 8 on 2 KV heads, D = 128, bf16, pages of 16; lengths
// with an idle slot (0) in the middle, 1 and 113, then random.
KernelCase make(std::string name, DType kv = DType::kBF16, int page_size = 16) {
  KernelCase k{std::move(name), DecodeCase{}};
  k.c.batch = 17;
  k.c.q_len = 1;
  k.c.kv_heads = 2;
  k.c.group = 8;
  k.c.head_dim = 128;
  k.c.cache.dtype = kv;
  k.c.cache.page_size = page_size;
  k.c.kv_lens = {57, 0, 113, 1};
  return k;
}

// Long sequences for the split grid (several tiles per split).
const std::vector<int> kLongLens = {2047, 1000, 0, 113, 1, 65, 640};

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  auto add = [&](KernelCase k, int max_len = 130) {
    std::mt19937_64 rng(cases.size() + 7);
    std::uniform_int_distribution<int> len(k.c.q_len, max_len);
    while (static_cast<int>(k.c.kv_lens.size()) < k.c.batch) k.c.kv_lens.push_back(len(rng));
    k.c.kv_lens.resize(k.c.batch);
    cases.push_back(std::move(k));
  };
  using K = KVLayout;

  // Every KV dtype x scale kind, both q dtypes.
  for (DType kv : {DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8}) {
    for (ScaleKind sk : {ScaleKind::kTensor, ScaleKind::kHead}) {
      auto k = make(std::string("q_bf16_kv_") + dtype_name(kv) +
                        (sk == ScaleKind::kHead ? "_per_head" : "_per_tensor"),
                    kv);
      k.c.scale_kind = sk;
      add(k);
    }
  }
  for (DType kv : {DType::kFP16, DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8}) {
    auto k = make(std::string("q_fp16_kv_") + dtype_name(kv) + "_per_head", kv);
    k.c.q_dtype = DType::kFP16;
    k.c.scale_kind = ScaleKind::kHead;
    add(k);
  }

  // Page sizes x layouts (an odd page size too), block table and CSR.
  for (int ps : {1, 16, 64, 128, 37}) {
    for (K layout : {K::kNHD, K::kHND}) {
      auto k = make("page" + std::to_string(ps) + (layout == K::kNHD ? "_nhd" : "_hnd"),
                    ps == 37 ? DType::kFP8E4M3 : DType::kBF16, ps);
      k.c.cache.layout = layout;
      k.c.cache.csr = ps == 64 || ps == 37;
      add(k, 400);
    }
  }
  {
    // Pool rows with 16-byte gaps (poisoned): page, slot and head strides != contiguous.
    auto k = make("page16_padded_pool_int8", DType::kInt8);
    k.c.cache.pad = 16;
    add(k);
  }

  // Draft tokens: q_len 1 / 3 / 16, causal or random tree masks.
  for (int q_len : {1, 3, 16}) {
    for (bool tree : {false, true}) {
      auto k = make("q" + std::to_string(q_len) + (tree ? "_tree" : "_causal"));
      k.c.q_len = q_len;
      k.c.tree = tree;
      k.c.kv_lens = {q_len + 40, 0, q_len, 113};
      add(k);
    }
  }

  // Beams with random shared prefixes (whole, none, page-aligned, anywhere).
  for (int width : {1, 2, 4}) {
    auto k = make("beams" + std::to_string(width) + "_shared");
    k.c.batch = 4 * width;
    k.c.beam_width = width;
    k.c.shared_prefix = true;
    k.c.kv_lens = {};
    add(k, 300);
  }
  {
    auto k = make("beams4_e4m3_page1_hnd", DType::kFP8E4M3, 1);
    k.c.batch = 12;
    k.c.beam_width = 4;
    k.c.shared_prefix = true;
    k.c.cache.layout = K::kHND;
    k.c.kv_lens = {};
    add(k, 200);
  }
  {
    auto k = make("beams2_tree_q3_gqa5");
    k.c.batch = 10;
    k.c.beam_width = 2;
    k.c.shared_prefix = true;
    k.c.q_len = 3;
    k.c.tree = true;
    k.c.group = 5;
    k.c.kv_lens = {};
    add(k, 300);
  }
  {
    // 2 beams x 3 tokens x 8 heads = 48 rows in one 64-row CTA: both beams share a CTA, so
    // each beam's own tail must be masked for the other beam's rows.
    auto k = make("beams2_q3_gqa8_split7");
    k.c.batch = 6;
    k.c.beam_width = 2;
    k.c.shared_prefix = true;
    k.c.q_len = 3;
    k.c.kv_lens = {};
    k.num_splits = 7;
    add(k, 900);
  }
  {
    // 4 beams x 16 tokens x 2 heads = 128 rows: two row tiles, each with two beams.
    auto k = make("beams4_q16_gqa2_rowtiles");
    k.c.batch = 8;
    k.c.beam_width = 4;
    k.c.shared_prefix = true;
    k.c.q_len = 16;
    k.c.group = 2;
    k.c.kv_lens = {};
    add(k, 300);
  }

  // Forced split counts (1 = single-pass epilogue; 64 > tiles leaves empty splits).
  for (int splits : {1, 2, 7, 64}) {
    auto k = make("splits" + std::to_string(splits));
    k.c.batch = static_cast<int>(kLongLens.size());
    k.c.kv_lens = kLongLens;
    k.num_splits = splits;
    add(k);
  }
  {
    auto k = make("splits_auto_batch1_long", DType::kFP8E4M3);
    k.c.batch = 1;
    k.c.kv_lens = {3000};
    add(k);
  }
  {
    auto k = make("splits13_e5m2_tree_q4_window", DType::kFP8E5M2);
    k.c.batch = 5;
    k.c.q_len = 4;
    k.c.tree = true;
    k.c.window = {300, -1};
    k.c.kv_lens = {1500, 4, 0, 700, 301};
    k.num_splits = 13;
    add(k);
  }

  // GQA ratios, batch 1 and 17, kv_len 1 and 113.
  for (int group : {1, 5, 8}) {
    auto k = make("gqa" + std::to_string(group));
    k.c.group = group;
    k.c.kv_heads = group == 1 ? 8 : 3;
    add(k);
  }
  {
    auto k = make("gqa128_mqa");
    k.c.kv_heads = 1;
    k.c.group = 128;
    k.c.batch = 3;
    add(k);
  }
  {
    auto k = make("gqa7_q16_rowtiles");  // 112 rows: two row tiles of 64
    k.c.group = 7;
    k.c.q_len = 16;
    k.c.kv_lens = {16, 0, 113, 200};
    add(k);
  }
  {
    auto k = make("batch1_kv1");
    k.c.batch = 1;
    k.c.kv_lens = {1};
    add(k);
  }
  {
    auto k = make("batch1_kv113");
    k.c.batch = 1;
    k.c.kv_lens = {113};
    add(k);
  }

  // Head dims 64 and 256 (256: warp pairs split the output features; 32-row CTAs).
  for (int d : {64, 256}) {
    for (DType kv : {DType::kBF16, DType::kFP8E4M3, DType::kInt8}) {
      auto k = make("d" + std::to_string(d) + "_" + dtype_name(kv), kv);
      k.c.head_dim = d;
      k.c.group = 5;
      add(k, 300);
    }
  }
  {
    auto k = make("d256_fp16_q16_gqa5_split7");  // 80 rows: three 32-row tiles
    k.c.head_dim = 256;
    k.c.q_dtype = DType::kFP16;
    k.c.cache.dtype = DType::kFP16;
    k.c.q_len = 16;
    k.c.group = 5;
    k.c.kv_lens = {16, 0, 500, 113};
    k.num_splits = 7;
    add(k);
  }
  {
    auto k = make("d64_e5m2_beams2_hnd", DType::kFP8E5M2);
    k.c.head_dim = 64;
    k.c.batch = 8;
    k.c.beam_width = 2;
    k.c.shared_prefix = true;
    k.c.cache.layout = K::kHND;
    k.c.kv_lens = {};
    add(k, 300);
  }

  // Masks and logits: windows, non-causal, sinks, softcap, custom scale.
  {
    // 4 tokens x 4 heads = 16 rows (the small-grid kernel's most), more queries than keys.
    auto k = make("q4_gqa4_causal_short_kv");
    k.c.q_len = 4;
    k.c.group = 4;
    k.c.kv_lens = {2, 0, 4, 113, 1, 3};
    add(k);
  }
  {
    auto k = make("noncausal_q2_window8_8_batch1");
    k.c.q_len = 2;
    k.c.causal = false;
    k.c.window = {8, 8};
    k.c.batch = 1;
    k.c.kv_lens = {700};
    add(k);
  }
  {
    auto k = make("sinks_softcap_q2_fp16_split5_page1");
    k.c.q_dtype = DType::kFP16;
    k.c.cache.dtype = DType::kFP16;
    k.c.cache.page_size = 1;
    k.c.q_len = 2;
    k.c.sinks = true;
    k.c.softcap = 5.f;
    k.c.batch = 3;
    k.c.kv_lens = {1000, 0, 333};
    k.num_splits = 5;
    add(k);
  }
  {
    auto k = make("window64_causal_long");
    k.c.window = {64, -1};
    k.c.batch = 5;
    k.c.kv_lens = {2047, 1000, 113, 1, 65};
    add(k);
  }
  {
    auto k = make("noncausal_q4_window8_8_gqa5");
    k.c.q_len = 4;
    k.c.causal = false;
    k.c.window = {8, 8};
    k.c.group = 5;
    k.c.kv_lens = {4, 113, 60, 0};
    add(k);
  }
  {
    auto k = make("noncausal_q3_full");
    k.c.q_len = 3;
    k.c.causal = false;
    add(k);
  }
  {
    auto k = make("sinks_softcap_int8_head", DType::kInt8);
    k.c.scale_kind = ScaleKind::kHead;
    k.c.sinks = true;
    k.c.softcap = 2.f;
    add(k);
  }
  {
    auto k = make("sinks_softcap30_split7");
    k.c.sinks = true;
    k.c.softcap = 30.f;
    k.c.batch = static_cast<int>(kLongLens.size());
    k.c.kv_lens = kLongLens;
    k.num_splits = 7;
    add(k);
  }
  {
    auto k = make("scale0p3_d64", DType::kBF16);
    k.c.head_dim = 64;
    k.c.scale = 0.3f;
    add(k);
  }

  // Both configurations where D = 128 bf16 q has a three-CTA kernel (a bf16, fp8 e4m3 or fp8
  // e5m2 cache): the plan picks the three-CTA one only where the grid fills a third slot an SM,
  // which few of these small cases do, so every such case runs again forced to each.
  const size_t n_plain = cases.size();
  for (size_t i = 0; i < n_plain; ++i) {
    const DecodeCase& c = cases[i].c;
    const DType kv = c.cache.dtype;
    if (c.head_dim != 128 || c.q_dtype != DType::kBF16 ||
        (kv != DType::kBF16 && kv != DType::kFP8E4M3 && kv != DType::kFP8E5M2)) {
      continue;
    }
    for (int config : {2, 3}) {
      KernelCase k = cases[i];
      k.name += config == 2 ? "_ctas2" : "_ctas3";
      k.config = config;
      k.small = 0;
      cases.push_back(std::move(k));
    }
  }
  // Both kernels wherever the small-grid one takes the call (beam width 1, no tree mask, <= 16
  // rows a request, D = 64 or 128, any cache): the plan picks it there, so each such case runs
  // again forced to each kernel (the tile kernel's only coverage of these shapes).
  for (size_t i = 0; i < n_plain; ++i) {
    const DecodeCase& c = cases[i].c;
    const bool takes = c.beam_width == 1 && !c.tree && c.q_len * c.group <= 16 &&
                       (c.head_dim == 64 || c.head_dim == 128);
    if (!takes) continue;
    for (int small : {0, 1}) {
      KernelCase k = cases[i];
      k.name += small == 1 ? "_small" : "_tiles";
      k.small = small;
      cases.push_back(std::move(k));
    }
    // The small kernel's three-CTA instance over e4m3 and int8 caches (the plan takes it where it
    // saves a wave, which none of these small cases does).
    if (c.cache.dtype == DType::kFP8E4M3 || c.cache.dtype == DType::kInt8) {
      KernelCase k = cases[i];
      k.name += "_small_ctas3";
      k.small = 1;
      k.config = 3;
      cases.push_back(std::move(k));
    }
  }
  // The narrow kernel wherever it takes the call (beam width 1, no tree mask, <= 8 rows a
  // request, D = 64 or 128, a 16-bit cache of q's dtype in pages of a multiple of 16 keys): only
  // when asked for (kAuto does not take it), one split whatever the case asked.
  auto narrow_takes = [](const DecodeCase& c) {
    return c.beam_width == 1 && !c.tree && c.q_len * c.group <= 8 &&
           (c.head_dim == 64 || c.head_dim == 128) && c.cache.dtype == c.q_dtype &&
           c.cache.page_size % 16 == 0;
  };
  auto add_narrow = [&](KernelCase k) {
    k.name += "_narrow";
    k.small = 2;
    k.num_splits = 0;
    k.config = 0;
    cases.push_back(std::move(k));
  };
  for (size_t i = 0; i < n_plain; ++i) {
    if (narrow_takes(cases[i].c)) add_narrow(cases[i]);
  }
  {
    // Two drafts x GQA 4 (8 rows), a window both ways, sinks and softcap, fp16 over HND pages of
    // 32, with keys past the window's start inside a block (its first rows zero-filled).
    auto k = make("q2_gqa4_window37_5_sinks_softcap_fp16_hnd_page32", DType::kFP16, 32);
    k.c.q_dtype = DType::kFP16;
    k.c.cache.layout = KVLayout::kHND;
    k.c.q_len = 2;
    k.c.group = 4;
    k.c.causal = false;
    k.c.window = {37, 5};
    k.c.sinks = true;
    k.c.softcap = 5.f;
    k.c.kv_lens = {2047, 0, 1, 113, 40};
    add(k, 1000);
    add_narrow(cases.back());
  }
  {
    // Long requests (several hundred blocks a warp), causal window, GQA 5 at head dim 64, pages
    // of 64 through CSR, per-head scales.
    auto k = make("d64_gqa5_window300_long_csr_page64", DType::kBF16, 64);
    k.c.head_dim = 64;
    k.c.group = 5;
    k.c.window = {300, -1};
    k.c.cache.csr = true;
    k.c.scale_kind = ScaleKind::kHead;
    k.c.kv_lens = kLongLens;
    k.c.batch = static_cast<int>(kLongLens.size());
    add(k, 4000);
    add_narrow(cases.back());
  }
  {
    // MHA (GQA 1): one row a request, 17 requests of 0 .. 4000 keys.
    auto k = make("gqa1_mha_long", DType::kBF16, 16);
    k.c.group = 1;
    k.c.kv_heads = 8;
    k.c.kv_lens = {4000, 0, 1, 113};
    add(k, 4000);
    add_narrow(cases.back());
  }
  return cases;
}

double unit_roundoff(DType t) {
  return t == DType::kFP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

// Largest |real V| any query can see (stored * per-head scale).
double max_abs_value(const decode_case::DecodeRun& r) {
  double m = 0;
  for (size_t b = 0; b < r.stored_v.size(); ++b) {
    for (size_t h = 0; h < r.stored_v[b].size(); ++h) {
      for (const auto& tok : r.stored_v[b][h]) {
        for (double x : tok) m = std::max(m, std::fabs(x * r.v_scale[h]));
      }
    }
  }
  return m;
}

struct Outputs {
  HostTensor out, lse;
};

class DecodeKernel : public GpuTestWithParam<KernelCase> {};

TEST_P(DecodeKernel, MatchesReference) {
  const KernelCase& kc = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  auto r = decode_case::random_run(kc.c, rng);
  decode_case::assemble(*r, rng);
  DecodeOptions opts = r->opts;
  opts.num_splits = kc.num_splits;
  using Kernel = ::hopattn::DecodeKernel;  // (DecodeKernel here is this file's test fixture)
  if (kc.small >= 0) {
    opts.kernel = kc.small == 2 ? Kernel::kNarrow : kc.small == 1 ? Kernel::kSmall : Kernel::kTiles;
  }
  const DecodeArgs& host = r->args;

  // The oracle: the reference with fp32 outputs (no 16-bit rounding on its side).
  const int64_t B = kc.c.batch, L = kc.c.q_len, H = r->q_heads, D = kc.c.head_dim;
  HostTensor want_out(DType::kFP32, {B, L, H, D});
  HostTensor want_lse(DType::kFP32, {B, L, H});
  {
    DecodeArgs ref = host;
    ref.out = want_out;
    ref.lse = want_lse;
    reference::decode(ref, opts);
  }

  DeviceSet dev;
  DecodeArgs gpu = upload_decode_args(dev, *r, host);

  const size_t ws_bytes = decode_workspace_size(gpu, opts);
  kernels::decode::LaunchPlan plan = kernels::decode::device_plan(gpu, opts);
  if (kc.config != 0) plan.config = kc.config;
  const bool internal = kc.config != 0;
  ASSERT_EQ(ws_bytes, plan.workspace_bytes);
  if (kc.num_splits > 0) ASSERT_EQ(plan.num_splits, kc.num_splits);
  DeviceAllocation ws(ws_bytes);
  // Garbage except the semaphores: the zero-once contract promises only those.
  check_cuda(cudaMemset(ws.data(), 0x5a, ws_bytes > 0 ? ws_bytes : 16), "cudaMemset");
  if (plan.num_splits > 1) {
    check_cuda(cudaMemset(ws.data(), 0, plan.semaphore_bytes), "cudaMemset(semaphores)");
  }
  gpu.workspace = {ws_bytes > 0 ? ws.data() : nullptr, ws_bytes};

  auto run = [&](Outputs& got) {
    dev.poison(r->out_buf);
    dev.poison(r->lse_buf);
    if (!internal) {
      ::hopattn::decode(gpu, opts, nullptr);
    } else {
      ::hopattn::validate::decode(gpu, opts);  // what the public entry point checks first
      kernels::decode::launch(gpu, opts, plan, nullptr);
    }
    check_cuda(cudaDeviceSynchronize(), "decode kernel");
    got.out = HostTensor(r->out_buf.dtype(), r->out_buf.shape());
    got.lse = HostTensor(r->lse_buf.dtype(), r->lse_buf.shape());
    dev.download(r->out_buf, got.out);
    dev.download(r->lse_buf, got.lse);
  };
  // Every semaphore back at zero after a launch (the last block of each problem reset it).
  auto expect_semaphores_zero = [&](const char* when) {
    if (plan.num_splits <= 1) return;
    std::vector<uint32_t> sem(plan.problems);
    check_cuda(
        cudaMemcpy(sem.data(), ws.data(), sem.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost),
        "cudaMemcpy(semaphores)");
    size_t dirty = 0;
    for (uint32_t s : sem) dirty += s != 0;
    EXPECT_EQ(dirty, 0u) << "semaphores not reset by the last block of their problem, " << when;
  };
  Outputs first, second;
  run(first);
  expect_semaphores_zero("after the first launch");
  run(second);
  expect_semaphores_zero("after the second launch");

  const std::vector<double> got = gather(rebase(host.out, r->out_buf, first.out));
  const std::vector<double> got_lse = gather(rebase(host.lse, r->lse_buf, first.lse));
  const std::vector<double> want = gather(want_out);
  const std::vector<double> want_l = gather(want_lse);
  const std::vector<double> again = gather(rebase(host.out, r->out_buf, second.out));
  const std::vector<double> again_lse = gather(rebase(host.lse, r->lse_buf, second.lse));

  const double vmax = std::max(max_abs_value(*r), 1e-3);
  const double tol = 4.0 * unit_roundoff(kc.c.q_dtype) * vmax;
  int64_t bad = 0, nan = 0;
  double max_err = 0;
  std::string first_bad;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (!std::isfinite(got[i])) ++nan;
    if (!(err <= tol)) {
      if (bad++ == 0) {
        first_bad = "out[" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", want " +
                    std::to_string(want[i]);
      }
    }
    if (std::isnan(err) || err > max_err) max_err = err;
  }
  int64_t bad_lse = 0;
  double max_lse_err = 0;
  for (size_t i = 0; i < want_l.size(); ++i) {
    const bool ok = want_l[i] == -INFINITY ? got_lse[i] == -INFINITY
                                           : std::fabs(got_lse[i] - want_l[i]) <= 1e-3;
    if (!ok) {
      if (bad_lse++ == 0) {
        first_bad += "; lse[" + std::to_string(i) + "] = " + std::to_string(got_lse[i]) +
                     ", want " + std::to_string(want_l[i]);
      }
    }
    if (std::isfinite(want_l[i]))
      max_lse_err = std::max(max_lse_err, std::fabs(got_lse[i] - want_l[i]));
  }
  const double l2 = rel_l2(got, want);
  std::printf(
      "[ %s ] seed %llu splits %d rows/cta %d row tiles %d config %d%s: max err %.3g (tol %.3g), "
      "rel L2 %.3g, lse max err %.3g\n",
      kc.name.c_str(), static_cast<unsigned long long>(seed), plan.num_splits, plan.rows_per_cta,
      plan.row_tiles, plan.config,
      plan.narrow  ? " narrow"
      : plan.small ? " small"
                   : "",
      max_err, tol, l2, max_lse_err);
  EXPECT_EQ(nan, 0) << "non-finite outputs (poison left, or NaN leaked)";
  EXPECT_EQ(bad, 0) << bad << " outputs beyond " << tol << "; first: " << first_bad;
  EXPECT_EQ(bad_lse, 0) << bad_lse << " lse values beyond 1e-3; " << first_bad;
  if (dtype_size(kc.c.cache.dtype) == 1) EXPECT_LE(l2, 2e-2);

  // Bitwise-identical second run on the same (now used) workspace.
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i)
    differ += std::memcmp(&got[i], &again[i], sizeof(double)) != 0;
  for (size_t i = 0; i < got_lse.size(); ++i) {
    differ += std::memcmp(&got_lse[i], &again_lse[i], sizeof(double)) != 0;
  }
  EXPECT_EQ(differ, 0u) << "second run on the same workspace differs";
}

INSTANTIATE_TEST_SUITE_P(Grid, DecodeKernel, ::testing::ValuesIn(kernel_cases()),
                         [](const ::testing::TestParamInfo<KernelCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace hopattn::testing
