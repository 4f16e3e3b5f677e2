// Fixed case lines as ordinary tests: edges written by hand and every case the fuzzer once failed
// on (shrunk), each of which must pass; and the machinery itself (text form, legality, shrinker).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "check.hpp"
#include "cpu/fwd_bwd_problem.hpp"
#include "generate.hpp"
#include "hopattn/api.hpp"
#include "invalid.hpp"
#include "problem.hpp"
#include "shrink.hpp"

namespace hopattn::fuzz {
namespace {

::testing::AssertionResult passes(const std::string& line) {
  return line_passes(line, public_api(), naive_formulas(), Tolerance::reference_vs_naive());
}

TEST(FuzzCase, TextFormRoundTrips) {
  for (Family f : kFamilies) {
    for (uint64_t seed = 1; seed <= 50; ++seed) {
      const std::string line = describe(generate(f, seed));
      EXPECT_EQ(describe(parse(line)), line);
    }
  }
}

TEST(FuzzCase, GeneratedCasesAreLegal) {
  for (Family f : kFamilies) {
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      Case c = generate(f, seed);
      const std::string line = describe(c);
      legalize(c);
      EXPECT_EQ(describe(c), line);
    }
  }
}

TEST(FuzzCase, ShortLinesKeepDefaults) {
  const Case c = parse("decode seed=3 q_len=4 kv_lens=9,0");
  EXPECT_EQ(c.family, Family::kDecode);
  EXPECT_EQ(c.seed, 3u);
  EXPECT_EQ(c.decode.c.q_len, 4);
  EXPECT_EQ(c.decode.c.kv_lens, (std::vector<int>{9, 0}));
  EXPECT_EQ(c.decode.c.head_dim, testing::decode_case::DecodeCase{}.head_dim);
  EXPECT_THROW(parse("decode seed=3 q_len=x"), std::invalid_argument);
  EXPECT_THROW(parse("decode nonsense=1"), std::invalid_argument);
  EXPECT_THROW(parse("warp seed=1"), std::invalid_argument);
}

// Edges a random draw reaches only now and then: nothing to attend to at all, one of everything.
TEST(FuzzEdges, DegenerateCasesPass) {
  for (const char* line : {
           "fwd seed=1 layout=varlen q_lens=0,0 kv_lens=0,5 sinks=1",
           "fwd seed=2 layout=dense q_lens=3 kv_lens=0 causal=1",
           "fwd seed=3 layout=paged q_lens=4,1 kv_lens=0,0 page_size=1 csr=1 pad_rows=2",
           "bwd seed=4 layout=varlen q_lens=5 kv_lens=2 causal=1 sinks=1 no_sink_head0=1",
           "bwd seed=5 layout=varlen q_lens=0,3 kv_lens=4,0 packed_kv=1 pad_rows=1",
           "decode seed=6 batch=3 kv_lens=0,0,0 sinks=1",
           "decode seed=7 batch=4 beam_width=4 shared_prefix=1 q_len=16 kv_lens=16 tree=1",
           "mla seed=8 q_lens=0,0 kv_lens=3,0",
           "mla seed=9 q_lens=5 kv_lens=2 causal=1 kv_dtype=fp8_e4m3 kv_scale=0.125",
           "merge seed=10 n=1 tokens=0",
           "merge seed=11 n=2 empty_percent=100",
           "merge seed=12 n=16 lse_center=1000 lse_spread=100 out_dtype=bf16",
           "batch seed=13 q_lens=0,0,0 kv_lens=0,17,0 pad_rows=2",
           "batch seed=14 q_lens=1 kv_lens=1 num_ctas=1 sinks=1",
           "batch seed=15 q_lens=300,1,16 kv_lens=300,900,16 num_ctas=0 page_size=1 layout=HND",
           "batch seed=16 q_lens=40,2 kv_lens=41,2 window=0,0 causal=0 kv_dtype=fp8_e4m3 "
           "per_head_scales=1 q_dtype=bf16",
       }) {
    EXPECT_TRUE(passes(line)) << line;
  }
}

// Found by the fuzzer (the fuzzer's own defects count too): an aliasing view built from a
// negative-strided out started at out.data(), the highest address, and so reached past the buffer.
TEST(FuzzRegression, AliasOfReversedOutputStaysInsideIt) {
  EXPECT_TRUE(
      passes("fwd seed=501001 layout=varlen hq=9 hkv=1 dqk=2 dv=4 q_lens=54 kv_lens=0 "
             "dtype=bf16 reversed=1 corrupt=lse_aliases_out"));
  EXPECT_TRUE(
      passes("bwd seed=501069 layout=varlen hq=32 hkv=1 dqk=30 dv=32 q_lens=7,10 "
             "kv_lens=0,0 dtype=bf16 reversed=1 corrupt=lse_aliases_out"));
}

// bwd: the naive formulas' backward from their own forward's rounded lse, against the reference
// backward from the lse the reference forward stored: 6 of 88 lse one fp32 ulp apart moved a
// dv element that cancels to ~5e-8 by as much. The naive backward now reads the stored out and
// lse, the backward's inputs (implementations.cpp, naive_attn).
TEST(FuzzRegression, BwdFromTheStoredForward) {
  EXPECT_TRUE(
      passes("bwd seed=201009 layout=varlen hq=4 hkv=1 dqk=64 dv=64 q_lens=36,22 kv_lens=0,40 "
             "dtype=bf16 causal=1 window=0,-1 q_range=2 page_size=1"));
}

// The shrinker against a made-up defect (any request with kv_len >= 10 and Hq >= 4 "fails"):
// it must come down to one request of exactly 10 keys, the smallest failing length.
// A gradient that cancels to exactly 0 in the reference (one visible key: dP = D) is, in an fp32
// kernel, a residue of its terms: the kernel tolerance allows term_roundoff of the reference's
// Part::terms, which the public API's bwd outputs carry, and no more.
TEST(FuzzCheck, GradientTermsBoundTheResidueWhereTheyCancel) {
  std::unique_ptr<HostProblem> p = build(
      parse("bwd seed=1101042 layout=dense hq=5 hkv=1 dqk=128 dv=128 q_lens=1 kv_lens=1 dtype=fp16 "
            "q_range=8 scale=1 page_size=1"));
  Outputs want = public_api().run(*p);
  attach_gradient_terms(*p, want);
  const Part* dk = nullptr;
  for (const Part& part : want) {
    if (part.name == "dk of request 0") dk = &part;
  }
  ASSERT_NE(dk, nullptr);
  ASSERT_EQ(dk->terms.size(), dk->values.size());
  double smallest_terms = INFINITY;
  for (size_t i = 0; i < dk->values.size(); ++i) {
    EXPECT_EQ(dk->values[i], 0.0) << "one key: dS = P (dP - D) = 0 exactly";
    smallest_terms = std::min(smallest_terms, dk->terms[i]);
  }
  ASSERT_GT(smallest_terms, 0.0);
  // The kernel's residues measured on an H200 (run set q) were up to 1.9e-5 here.
  const auto with_dk = [&](double value, bool terms) {
    Outputs got = want, ref = want;
    for (Part& part : got) {
      if (part.name == dk->name) part.values.assign(part.values.size(), value);
    }
    if (!terms) {
      for (Part& part : ref) part.terms.clear();
    }
    return compare(got, ref, Tolerance::kernel_vs_reference()).ok();
  };
  EXPECT_TRUE(with_dk(1.9e-5, true));
  EXPECT_FALSE(with_dk(1.9e-5, false));  // the constant floor alone: 7.7e-6
  EXPECT_FALSE(with_dk(1e-2, true));     // terms are no blanket: a real error still shows
}

// The backward's gradients given its saved out can move far more than that out's rounding: here
// (bwd seed 900718: fp16, q of 8, rows that see one to five keys, dS = P (dP - D) cancelling)
// one ulp of out moves dq by up to ~70x the kernel tolerance. So a kernel's backward is only
// comparable with the reference's when both are handed the same out and lse: the GPU fuzz hands
// the backward kernel the reference's forward (fuzz/gpu/cuda_api.cpp).
TEST(FuzzCheck, BwdGradientsFollowTheSavedOutputFarPastItsRounding) {
  std::unique_ptr<HostProblem> p =
      build(parse("bwd seed=900718 layout=varlen hq=2 hkv=2 dqk=128 dv=128 q_lens=0,32,62,225,16 "
                  "kv_lens=0,5,7,5,11 dtype=fp16 window=-1,0 q_range=8 scale=0.5 deterministic=1 "
                  "page_size=128 kv_layout=HND csr=1"));
  const Outputs want = public_api().run(*p);
  testing::fwd_bwd::Bundle& t = *p->bundle;
  ASSERT_EQ(t.fwd.out.dtype(), DType::kFP16);
  ASSERT_TRUE(t.fwd.out.is_contiguous());
  // One ulp of every finite nonzero element of out, away from zero or toward it in turn.
  uint16_t* bits = static_cast<uint16_t*>(t.fwd.out.data());
  for (int64_t i = 0; i < t.fwd.out.numel(); ++i) {
    const bool finite_nonzero = (bits[i] & 0x7fffu) != 0 && (bits[i] & 0x7c00u) != 0x7c00u;
    if (finite_nonzero) bits[i] = static_cast<uint16_t>(i % 2 == 0 ? bits[i] + 1 : bits[i] - 1);
  }
  attention_bwd(t.bwd, p->c.attn.opts);
  const Outputs got = read_outputs(*p);
  const Report r = compare(got, want, Tolerance::kernel_vs_reference());
  EXPECT_EQ(r.kind, Report::Kind::kMismatch);
  EXPECT_NE(r.detail.find("dq of request 1"), std::string::npos) << r.detail;
}

TEST(FuzzShrink, FindsTheSmallestFailingCase) {
  auto check = [](const Case& c) {
    const auto& s = c.attn.spec;
    for (int64_t n : s.kv_lens) {
      if (n >= 10 && s.hq >= 4) return Report{Report::Kind::kMismatch, "made up"};
    }
    return Report{};
  };
  Case c = parse(
      "fwd seed=5 layout=paged hq=12 hkv=2 q_lens=3,50,7,0 kv_lens=5,37,90,1 "
      "causal=1 softcap=2.5 sinks=1 page_size=16 csr=1");
  legalize(c);
  ASSERT_FALSE(check(c).ok());
  const Shrunk s = shrink(c, check(c), check);
  EXPECT_EQ(s.c.attn.spec.kv_lens, (std::vector<int64_t>{10})) << describe(s.c);
  EXPECT_EQ(s.c.attn.spec.q_lens, (std::vector<int64_t>{0})) << describe(s.c);
  EXPECT_GE(s.c.attn.spec.hq, 4);
  EXPECT_EQ(s.c.attn.spec.hkv, 1);
  EXPECT_FALSE(s.c.attn.opts.causal || s.c.attn.spec.sinks || s.c.attn.build.csr);
  EXPECT_EQ(s.c.attn.build.layout, testing::fwd_bwd::Layout::kVarlen);
  // A different kind of failure (here: none) never replaces the one being shrunk.
  const Shrunk none = shrink(c, Report{Report::Kind::kCrash, "other"}, check);
  EXPECT_EQ(none.steps, 0);
}

}  // namespace
}  // namespace hopattn::fuzz
