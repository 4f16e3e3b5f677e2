// The naive GPU decode (tests/naive_gpu) against the CPU reference on fresh random inputs. The
// problems come from the CPU tests' decode builder (tests/cpu/decode_case.hpp): poisoned unused
// pages and slots, strided block tables, every KV dtype with per-tensor and per-head scales, tree
// masks, beams whose own pages differ from the shared prefix they must read through the first
// beam, kv_len 0, 1 and 113, page sizes 1, 16 and 64, GQA ratios 1, 5 and 8.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cpu/decode_case.hpp"
#include "decode_upload.hpp"
#include "gpu_test_support.hpp"
#include "naive_gpu/naive_attention.hpp"
#include "reference/reference.hpp"

namespace hopattn::testing {
namespace {

using decode_case::DecodeCase;
using decode_case::ScaleKind;

struct GpuDecodeCase {
  std::string name;
  DecodeCase c;
};

void PrintTo(const GpuDecodeCase& c, std::ostream* os) { *os << c.name; }

// The case's defaults: 17 requests, one new token, GQA 8, head dim 128, bf16, pages of 16.
GpuDecodeCase make(std::string name, DType kv_dtype = DType::kBF16, int page_size = 16) {
  GpuDecodeCase g{std::move(name), DecodeCase{}};
  g.c.batch = 17;
  g.c.q_len = 1;
  g.c.kv_heads = 1;
  g.c.group = 8;
  g.c.head_dim = 128;
  g.c.cache.dtype = kv_dtype;
  g.c.cache.page_size = page_size;
  // The edges first (0, 1, 113), then random lengths; kv_len 0 < q_len sees nothing.
  g.c.kv_lens = {0, 1, 113};
  return g;
}

std::vector<GpuDecodeCase> decode_cases() {
  std::vector<GpuDecodeCase> cases;
  auto add = [&](GpuDecodeCase g) {
    // Random lengths (to 130) for the rows past the listed edges.
    std::mt19937_64 rng(cases.size() + 1);
    std::uniform_int_distribution<int> len(g.c.q_len, 130);
    while (static_cast<int>(g.c.kv_lens.size()) < g.c.batch) g.c.kv_lens.push_back(len(rng));
    g.c.kv_lens.resize(g.c.batch);
    cases.push_back(std::move(g));
  };
  using K = KVLayout;
  { add(make("bf16_gqa8_ps16")); }
  {
    auto g = make("fp16_gqa5_ps1_hnd_csr", DType::kFP16, 1);
    g.c.q_dtype = DType::kFP16;
    g.c.group = 5;
    g.c.cache.layout = K::kHND;
    g.c.cache.csr = true;
    add(g);
  }
  {
    auto g = make("e4m3_tensor_mha_ps64", DType::kFP8E4M3, 64);
    g.c.kv_heads = 4;
    g.c.group = 1;
    add(g);
  }
  {
    auto g = make("e4m3_head_q4_gqa5_ps16_hnd", DType::kFP8E4M3);
    g.c.scale_kind = ScaleKind::kHead;
    g.c.q_len = 4;
    g.c.kv_heads = 2;
    g.c.group = 5;
    g.c.cache.layout = K::kHND;
    g.c.kv_lens = {4, 5, 113};
    add(g);
  }
  { add(make("e5m2_tensor_gqa8", DType::kFP8E5M2)); }
  {
    auto g = make("e5m2_head_window_long", DType::kFP8E5M2);
    g.c.scale_kind = ScaleKind::kHead;
    g.c.window = {64, -1};
    g.c.batch = 5;
    g.c.kv_lens = {2047, 1000, 113, 1, 65};
    add(g);
  }
  {
    auto g = make("int8_tensor_hnd_padded", DType::kInt8);
    g.c.cache.layout = K::kHND;
    g.c.cache.pad = 8;
    g.c.padded = true;
    add(g);
  }
  {
    auto g = make("int8_head_sinks_softcap", DType::kInt8);
    g.c.scale_kind = ScaleKind::kHead;
    g.c.sinks = true;
    g.c.softcap = 2.f;
    add(g);
  }
  {
    auto g = make("tree_q4_bf16");
    g.c.q_len = 4;
    g.c.tree = true;
    g.c.kv_lens = {4, 5, 113};
    add(g);
  }
  {
    auto g = make("tree_q16_e4m3_head_ps64", DType::kFP8E4M3, 64);
    g.c.batch = 5;
    g.c.q_len = 16;
    g.c.tree = true;
    g.c.scale_kind = ScaleKind::kHead;
    g.c.kv_lens = {16, 17, 113};
    add(g);
  }
  {
    auto g = make("beams3_ps16");
    g.c.batch = 18;
    g.c.beam_width = 3;
    g.c.shared_prefix = true;
    g.c.kv_lens = {113, 113, 113};
    add(g);
  }
  {
    auto g = make("beams4_ps1_e4m3", DType::kFP8E4M3, 1);
    g.c.batch = 16;
    g.c.beam_width = 4;
    g.c.shared_prefix = true;
    g.c.kv_lens = {};
    add(g);
  }
  {
    auto g = make("beams2_tree_q4_hnd");
    g.c.batch = 10;
    g.c.beam_width = 2;
    g.c.shared_prefix = true;
    g.c.q_len = 4;
    g.c.tree = true;
    g.c.cache.layout = K::kHND;
    g.c.kv_lens = {};
    add(g);
  }
  {
    auto g = make("q16_causal_ps64", DType::kBF16, 64);
    g.c.q_len = 16;
    g.c.kv_lens = {16, 17, 113};
    add(g);
  }
  {
    auto g = make("noncausal_q4_window_gqa5");
    g.c.batch = 3;
    g.c.q_len = 4;
    g.c.causal = false;
    g.c.window = {8, 8};
    g.c.group = 5;
    g.c.kv_lens = {4, 113, 60};
    add(g);
  }
  {
    auto g = make("d64_gqa8_scale");
    g.c.head_dim = 64;
    g.c.scale = 0.3f;
    add(g);
  }
  {
    auto g = make("d256_gqa5_csr", DType::kBF16, 16);
    g.c.head_dim = 256;
    g.c.group = 5;
    g.c.cache.csr = true;
    add(g);
  }
  return cases;
}

class NaiveDecode : public GpuTestWithParam<GpuDecodeCase> {};

TEST_P(NaiveDecode, MatchesReference) {
  const GpuDecodeCase& g = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  auto r = decode_case::random_run(g.c, rng);
  decode_case::assemble(*r, rng);
  const DecodeArgs& host = r->args;

  r->out_buf.fill_bytes(0xff);
  r->lse_buf.fill_bytes(0xff);
  try {
    reference::decode(host, r->opts);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotImplemented) {
      GTEST_SKIP() << "CPU reference not implemented yet: " << e.what();
    }
    throw;
  }

  DeviceSet dev;
  const DecodeArgs gpu = upload_decode_args(dev, *r, host);
  dev.poison(r->out_buf);
  dev.poison(r->lse_buf);
  ::hopattn::naive::naive_decode(gpu, r->opts, nullptr);
  check_cuda(cudaDeviceSynchronize(), "naive_decode");

  HostTensor got_out(r->out_buf.dtype(), r->out_buf.shape());
  HostTensor got_lse(r->lse_buf.dtype(), r->lse_buf.shape());
  dev.download(r->out_buf, got_out);
  dev.download(r->lse_buf, got_lse);
  const Comparison out = compare_output(rebase(host.out, r->out_buf, got_out), host.out);
  const Comparison lse = compare_lse(rebase(host.lse, r->lse_buf, got_lse), host.lse);
  std::printf("[ %s ] seed %llu\n  out: %s\n  lse: %s\n", g.name.c_str(),
              static_cast<unsigned long long>(seed), out.summary().c_str(), lse.summary().c_str());
  EXPECT_EQ(out.failures, 0) << out.summary();
  // See naive_fwd_test.cpp: independent roundings rarely differ; a biased one differs often.
  EXPECT_LE(out.differing_fraction(), 0.05) << out.summary();
  EXPECT_EQ(lse.failures, 0) << lse.summary();
}

INSTANTIATE_TEST_SUITE_P(Grid, NaiveDecode, ::testing::ValuesIn(decode_cases()),
                         [](const ::testing::TestParamInfo<GpuDecodeCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace hopattn::testing
