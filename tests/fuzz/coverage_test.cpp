// What the first seeds of a run cover: every option the fuzzer claims to vary must come up among
// the cases a CI run certainly reaches, so that a generator change cannot quietly drop one.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "generate.hpp"
#include "invalid.hpp"

namespace hopattn::fuzz {
namespace {

using testing::decode_case::ScaleKind;
using testing::fwd_bwd::Layout;

// The CI run reaches well past this many cases a family (hundreds in its time budget).
constexpr uint64_t kSeeds = 300;

struct Option {
  const char* name;
  std::function<bool(const Case&)> holds;
};

void expect_covered(Family f, const std::vector<Option>& options) {
  for (const Option& o : options) {
    bool seen = false;
    for (uint64_t seed = 1; seed <= kSeeds && !seen; ++seed) seen = o.holds(generate(f, seed));
    EXPECT_TRUE(seen) << family_name(f) << ": no case with " << o.name << " in seeds 1.." << kSeeds;
  }
}

bool any_of_lens(const std::vector<int64_t>& v, const std::function<bool(int64_t)>& p) {
  for (int64_t x : v) {
    if (p(x)) return true;
  }
  return false;
}

// bwd draws pages less often (training has no KV cache): there only the layouts must come up.
std::vector<Option> attn_options(bool bwd) {
  auto a = [](const Case& c) -> const AttnCase& { return c.attn; };
  return {
      {"dense", [=](const Case& c) { return a(c).build.layout == Layout::kDense; }},
      {"varlen with an empty sequence",
       [=](const Case& c) {
         return a(c).build.layout == Layout::kVarlen &&
                any_of_lens(a(c).spec.q_lens, [](int64_t n) { return n == 0; });
       }},
      {"paged NHD, page 1",
       [=](const Case& c) {
         return a(c).build.layout == Layout::kPaged && a(c).build.kv_layout == KVLayout::kNHD &&
                a(c).build.page_size == 1;
       }},
      {bwd ? "paged HND" : "paged HND, page 256, several pages",
       [=](const Case& c) {
         return a(c).build.layout == Layout::kPaged && a(c).build.kv_layout == KVLayout::kHND &&
                (bwd || (a(c).build.page_size == 256 &&
                         any_of_lens(a(c).spec.kv_lens, [](int64_t n) { return n > 256; })));
       }},
      {"GQA 5", [=](const Case& c) { return a(c).spec.hq == 5 * a(c).spec.hkv; }},
      {"GQA 6", [=](const Case& c) { return a(c).spec.hq == 6 * a(c).spec.hkv; }},
      {"GQA 7", [=](const Case& c) { return a(c).spec.hq == 7 * a(c).spec.hkv; }},
      {"head dims (192, 128)",
       [=](const Case& c) { return a(c).spec.dqk == 192 && a(c).spec.dv == 128; }},
      {"causal with q_len > kv_len",
       [=](const Case& c) {
         for (size_t b = 0; b < a(c).spec.q_lens.size(); ++b) {
           if (a(c).opts.causal && a(c).spec.q_lens[b] > a(c).spec.kv_lens[b]) return true;
         }
         return false;
       }},
      {"a two-sided window",
       [=](const Case& c) { return a(c).opts.window.left >= 0 && a(c).opts.window.right >= 0; }},
      {"softcap", [=](const Case& c) { return a(c).opts.softcap > 0; }},
      {"sinks, one head without", [=](const Case& c) { return a(c).no_sink_head0; }},
      {"fp16", [=](const Case& c) { return a(c).spec.dtype == DType::kFP16; }},
      {"strided views", [=](const Case& c) { return a(c).build.strided; }},
      {"negative strides", [=](const Case& c) { return a(c).build.reversed; }},
      {"packed K/V", [=](const Case& c) { return a(c).build.packed_kv; }},
      {"unowned rows", [=](const Case& c) { return a(c).build.pad_rows > 0; }},
  };
}

TEST(FuzzCoverage, Fwd) { expect_covered(Family::kFwd, attn_options(false)); }
TEST(FuzzCoverage, Bwd) {
  std::vector<Option> options = attn_options(true);
  options.push_back({"deterministic", [](const Case& c) { return c.attn.opts.deterministic; }});
  expect_covered(Family::kBwd, options);
}

TEST(FuzzCoverage, Decode) {
  auto d = [](const Case& c) -> const testing::decode_case::DecodeCase& { return c.decode.c; };
  std::vector<Option> options = {
      {"q_len 1", [=](const Case& c) { return d(c).q_len == 1; }},
      {"q_len 16", [=](const Case& c) { return d(c).q_len == 16; }},
      {"a tree mask", [=](const Case& c) { return d(c).tree && d(c).q_len > 1; }},
      {"beams with a shared prefix",
       [=](const Case& c) { return d(c).beam_width > 1 && d(c).shared_prefix; }},
      {"per-head scales", [=](const Case& c) { return d(c).scale_kind == ScaleKind::kHead; }},
      {"splits", [=](const Case& c) { return c.decode.num_splits > 1; }},
      {"HND", [=](const Case& c) { return d(c).cache.layout == KVLayout::kHND; }},
      {"GQA 7", [=](const Case& c) { return d(c).group == 7; }},
      {"an idle slot",
       [=](const Case& c) {
         for (int n : d(c).kv_lens) {
           if (n == 0) return true;
         }
         return false;
       }},
  };
  for (DType t : {DType::kBF16, DType::kFP16, DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8}) {
    options.push_back({dtype_name(t), [=](const Case& c) { return d(c).cache.dtype == t; }});
  }
  expect_covered(Family::kDecode, options);
}

TEST(FuzzCoverage, Mla) {
  auto m = [](const Case& c) -> const testing::mla_case::MlaCase& { return c.mla.c; };
  expect_covered(
      Family::kMla,
      {
          {"one query", [=](const Case& c) { return m(c).q_lens[0] == 1; }},
          {"8 queries", [=](const Case& c) { return m(c).q_lens[0] == 8; }},
          {"a prefill chunk", [=](const Case& c) { return m(c).q_lens[0] > 16; }},
          {"fp8 e4m3 with kv_scale",
           [=](const Case& c) { return m(c).kv_dtype == DType::kFP8E4M3 && m(c).kv_scale != 1; }},
          {"non-causal", [=](const Case& c) { return !m(c).causal; }},
          {"page 1", [=](const Case& c) { return m(c).page_size == 1; }},
          {"22 heads", [=](const Case& c) { return m(c).heads == 22; }},
      });
}

TEST(FuzzCoverage, Merge) {
  expect_covered(
      Family::kMerge,
      {
          {"2 states, merge_states", [](const Case& c) { return !c.merge.n_way; }},
          {"16 states", [](const Case& c) { return c.merge.n == 16; }},
          {"only empty states", [](const Case& c) { return c.merge.empty_percent == 100; }},
          {"lse near 1000", [](const Case& c) { return c.merge.lse_center == 1000; }},
      });
}

TEST(FuzzCoverage, Batch) {
  auto b = [](const Case& c) -> const testing::batch_case::BatchCase& { return c.batch.c; };
  auto any_request = [=](const Case& c, const std::function<bool(int q, int kv)>& p) {
    for (size_t r = 0; r < b(c).q_lens.size(); ++r) {
      if (p(b(c).q_lens[r], b(c).kv_lens[r])) return true;
    }
    return false;
  };
  std::vector<Option> options = {
      {"an idle slot",
       [=](const Case& c) { return any_request(c, [](int q, int) { return q == 0; }); }},
      {"a decode and a prefill chunk in one step",
       [=](const Case& c) {
         return any_request(c, [](int q, int) { return q == 1; }) &&
                any_request(c, [](int q, int) { return q > 16; });
       }},
      {"a first chunk (nothing cached)",
       [=](const Case& c) {
         return any_request(c, [](int q, int kv) { return q > 16 && q == kv; });
       }},
      {"one CTA", [=](const Case& c) { return b(c).num_ctas == 1; }},
      {"the default grid", [=](const Case& c) { return b(c).num_ctas == 0; }},
      {"head_dim_v != head_dim",
       [=](const Case& c) { return b(c).head_dim_v != 0 && b(c).head_dim_v != b(c).head_dim; }},
      {"HND, page 1",
       [=](const Case& c) { return b(c).layout == KVLayout::kHND && b(c).page_size == 1; }},
      {"GQA 7", [=](const Case& c) { return b(c).group == 7; }},
      {"per-head scales, 8-bit",
       [=](const Case& c) { return b(c).per_head_scales && dtype_size(b(c).cache_dtype) == 1; }},
      {"a window", [=](const Case& c) { return b(c).window.left >= 0 || b(c).window.right >= 0; }},
      {"softcap", [=](const Case& c) { return b(c).softcap > 0; }},
      {"sinks", [=](const Case& c) { return b(c).sinks; }},
      {"non-causal", [=](const Case& c) { return !b(c).causal; }},
      {"rows past the step", [=](const Case& c) { return b(c).pad_rows > 0; }},
      {"padded cache rows", [=](const Case& c) { return b(c).cache_pad > 0; }},
      {"limits above the step",
       [=](const Case& c) { return b(c).max_batch > int(b(c).q_lens.size()); }},
  };
  for (DType t :
       {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8}) {
    options.push_back({dtype_name(t), [=](const Case& c) { return b(c).cache_dtype == t; }});
  }
  expect_covered(Family::kBatch, options);
}

// Every corruption of invalid.cpp is drawn by some seed of some family.
TEST(FuzzCoverage, EveryCorruption) {
  std::set<std::string> drawn;
  for (Family f : kFamilies) {
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) drawn.insert(generate_invalid(f, seed).corrupt);
  }
  for (const std::string& name : corruption_names()) EXPECT_TRUE(drawn.count(name)) << name;
}

}  // namespace
}  // namespace hopattn::fuzz
