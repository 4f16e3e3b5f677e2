// Validators of attention_fwd and attention_bwd: a valid argument set per layout (dense, varlen,
// paged) passes; each rule, broken alone, raises the right ErrorKind and message.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "api/validate.hpp"
#include "hopattn/api.hpp"
#include "validate_fwd_cases.hpp"
#include "validate_testing.hpp"

namespace hopattn::testing {
namespace {

void expect_rejections(Fwd (*make)(), const FwdRejection* begin, const FwdRejection* end) {
  for (const FwdRejection* r = begin; r != end; ++r) {
    Fwd f = make();
    r->mutate(f.keep, f.args, f.opts);
    EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, r->kind, r->fragment)) << r->name;
  }
}

// ------------------------------------------------------------------------------------ dense

TEST(ValidateFwd, ValidDenseCallsPass) {
  EXPECT_TRUE(passes([] { validate_fwd(dense_fwd()); }));
  EXPECT_TRUE(passes([] { validate_fwd(dense_fwd(kFP16)); }));
  EXPECT_TRUE(passes([] { validate_fwd(dense_fwd(kFP32)); })) << "fp32 is accepted on CPU";
  EXPECT_TRUE(passes([] { validate_fwd(dense_fwd(kBF16, 8, 8, 40, 24)); }))
      << "CPU: any Dqk, Dv in 1..1024";
  EXPECT_TRUE(passes([] { validate_fwd(dense_fwd(kBF16, 1, 1, 1024, 1)); }));
  for (int64_t hkv : {1, 2, 3, 6}) {
    EXPECT_TRUE(passes([&] { validate_fwd(dense_fwd(kBF16, 6, hkv)); })) << "Hkv " << hkv;
  }
  EXPECT_TRUE(passes([] { validate_fwd(dense_fwd(kBF16, 7, 7)); }));
  EXPECT_TRUE(passes([] {
    Fwd f = dense_fwd();
    f.args.sinks = {};  // optional
    f.opts.causal = true;
    f.opts.window = {16, 0};
    f.opts.softcap = 30.f;
    f.opts.scale = -0.125f;  // any finite nonzero scale
    validate_fwd(f);
  }));
  EXPECT_TRUE(passes([] {
    Fwd f;  // an empty batch
    f.args.q = f.keep.make(kBF16, {0, 5, 8, 64});
    f.args.k = f.keep.make(kBF16, {0, 7, 2, 64});
    f.args.v = f.keep.make(kBF16, {0, 7, 2, 64});
    f.args.out = f.keep.make(kBF16, {0, 5, 8, 64});
    f.args.lse = f.keep.make(kFP32, {0, 5, 8});
    validate_fwd(f);
  }));
}

TEST(ValidateFwd, CpuAcceptsAnyStridesAndAlignment) {
  Fwd f = dense_fwd();
  // q viewed [B, Sq, Hq, D] over a [B, Hq, Sq, D] buffer; k with a non-unit innermost stride;
  // out starting 2 bytes into its buffer. The reference addresses every element by its strides.
  f.args.q = with_strides(f.args.q, {5 * 8 * 64, 64, 5 * 64, 1});
  f.args.k = with_strides(f.args.k, {7 * 2 * 64, 2 * 64, 64, 2});
  f.args.out = shifted(f.args.out, 2);
  EXPECT_TRUE(passes([&] { validate_fwd(f); }));
}

const FwdRejection kDenseRejections[] = {
    {"q missing", [](auto&, auto& a, auto&) { a.q = {}; }, ErrorKind::kValue,
     "hopattn.attention_fwd: q: expected a tensor, got none"},
    {"q without data",
     [](auto&, auto& a, auto&) {
       a.q = TensorView(nullptr, kBF16, {2, 5, 8, 64});
     },
     ErrorKind::kValue, "q: expected a data pointer, got null for shape [2, 5, 8, 64]"},
    {"q fp8", [](auto&, auto& a, auto&) { a.q = with_dtype(a.q, DType::kFP8E4M3); },
     ErrorKind::kType, "q: expected bf16, fp16 or fp32, got fp8_e4m3"},
    {"q rank 3 without cu_seqlens",
     [](auto&, auto& a, auto&) {
       a.q = with_shape(a.q, {10, 8, 64});
     },
     ErrorKind::kValue,
     "q: expected rank 4 [B, Sq, Hq, Dqk] (or rank 3 [total_q, Hq, Dqk] with cu_seqlens_q), got "
     "shape [10, 8, 64]"},
    {"k missing", [](auto&, auto& a, auto&) { a.k = {}; }, ErrorKind::kValue,
     "k: expected a tensor, got none"},
    {"v missing", [](auto&, auto& a, auto&) { a.v = {}; }, ErrorKind::kValue,
     "v: expected a tensor, got none"},
    {"k negative size",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {2, -7, 2, 64});
     },
     ErrorKind::kValue, "k: expected non-negative sizes, got shape [2, -7, 2, 64]"},
    {"k dtype", [](auto&, auto& a, auto&) { a.k = with_dtype(a.k, kFP16); }, ErrorKind::kType,
     "k: expected bf16 (q's dtype), got fp16"},
    {"v dtype", [](auto&, auto& a, auto&) { a.v = with_dtype(a.v, kFP32); }, ErrorKind::kType,
     "v: expected bf16 (q's dtype), got fp32"},
    {"k on another device", [](auto&, auto& a, auto&) { a.k = on_cuda(a.k); }, ErrorKind::kType,
     "k: expected a tensor on cpu (q's device), got cuda:0"},
    {"k rank",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {14, 2, 64});
     },
     ErrorKind::kValue, "k: expected rank 4 [B, Sk, Hkv, Dqk], got shape [14, 2, 64]"},
    {"k batch",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {1, 7, 2, 64});
     },
     ErrorKind::kValue, "k: expected shape [2, 7, 2, 64] (q's B and Dqk), got shape [1, 7, 2, 64]"},
    {"k head dim",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {2, 7, 2, 32});
     },
     ErrorKind::kValue, "k: expected shape [2, 7, 2, 64] (q's B and Dqk), got shape [2, 7, 2, 32]"},
    {"v rank",
     [](auto&, auto& a, auto&) {
       a.v = with_shape(a.v, {14, 2, 64});
     },
     ErrorKind::kValue, "v: expected rank 4 [B, Sk, Hkv, Dv], got shape [14, 2, 64]"},
    {"v length",
     [](auto&, auto& a, auto&) {
       a.v = with_shape(a.v, {2, 6, 2, 64});
     },
     ErrorKind::kValue,
     "v: expected shape [2, 7, 2, 64] (k's shape with v's own Dv), got shape [2, 6, 2, 64]"},
    {"v heads",
     [](auto&, auto& a, auto&) {
       a.v = with_shape(a.v, {2, 7, 1, 64});
     },
     ErrorKind::kValue,
     "v: expected shape [2, 7, 2, 64] (k's shape with v's own Dv), got shape [2, 7, 1, 64]"},
    {"GQA ratio",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {2, 7, 3, 64});
       a.v = with_shape(a.v, {2, 7, 3, 64});
     },
     ErrorKind::kValue, "k: expected a KV head count Hkv >= 1 that divides Hq = 8, got Hkv = 3"},
    {"no KV heads",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {2, 7, 0, 64});
       a.v = with_shape(a.v, {2, 7, 0, 64});
     },
     ErrorKind::kValue, "k: expected a KV head count Hkv >= 1 that divides Hq = 8, got Hkv = 0"},
    {"no query heads",
     [](auto&, auto& a, auto&) {
       a.q = with_shape(a.q, {2, 5, 0, 64});
     },
     ErrorKind::kValue, "q: expected Hq >= 1 query heads, got Hq = 0"},
    {"head dim over 1024",
     [](auto&, auto& a, auto&) {
       a.q = with_shape(a.q, {2, 5, 8, 2000});
       a.k = with_shape(a.k, {2, 7, 2, 2000});
       a.v = with_shape(a.v, {2, 7, 2, 2000});
     },
     ErrorKind::kValue, "head_dim: expected Dqk and Dv in 1..1024, got 2000"},
    {"zero Dv",
     [](auto&, auto& a, auto&) {
       a.v = with_shape(a.v, {2, 7, 2, 0});
     },
     ErrorKind::kValue, "head_dim: expected Dqk and Dv in 1..1024, got (Dqk 64, Dv 0)"},
    {"out missing", [](auto&, auto& a, auto&) { a.out = {}; }, ErrorKind::kValue,
     "out: expected a tensor, got none"},
    {"out dtype", [](auto&, auto& a, auto&) { a.out = with_dtype(a.out, kFP16); }, ErrorKind::kType,
     "out: expected bf16 (q's dtype), got fp16"},
    {"out shape",
     [](auto&, auto& a, auto&) {
       a.out = with_shape(a.out, {2, 5, 8, 32});
     },
     ErrorKind::kValue,
     "out: expected shape [2, 5, 8, 64] (q's shape with Dv last), got shape [2, 5, 8, 32]"},
    {"out device", [](auto&, auto& a, auto&) { a.out = on_cuda(a.out); }, ErrorKind::kType,
     "out: expected a tensor on cpu (q's device), got cuda:0"},
    {"lse missing", [](auto&, auto& a, auto&) { a.lse = {}; }, ErrorKind::kValue,
     "lse: expected a tensor, got none"},
    {"lse dtype", [](auto&, auto& a, auto&) { a.lse = with_dtype(a.lse, kBF16); }, ErrorKind::kType,
     "lse: expected fp32, got bf16"},
    {"lse shape",
     [](auto&, auto& a, auto&) {
       a.lse = with_shape(a.lse, {2, 5});
     },
     ErrorKind::kValue,
     "lse: expected shape [2, 5, 8] (q's shape without the last dim), got shape [2, 5]"},
    {"sinks dtype", [](auto&, auto& a, auto&) { a.sinks = with_dtype(a.sinks, kBF16); },
     ErrorKind::kType, "sinks: expected fp32, got bf16"},
    {"sinks shape", [](auto&, auto& a, auto&) { a.sinks = with_shape(a.sinks, {2}); },
     ErrorKind::kValue, "sinks: expected shape [8] ([Hq]), got shape [2]"},
    {"sinks device", [](auto&, auto& a, auto&) { a.sinks = on_cuda(a.sinks); }, ErrorKind::kType,
     "sinks: expected a tensor on cpu (q's device), got cuda:0"},
    {"window left",
     [](auto&, auto&, auto& o) {
       o.window = {-2, 0};
     },
     ErrorKind::kValue, "window: expected left and right >= -1 (-1 = unbounded), got (-2, 0)"},
    {"window right",
     [](auto&, auto&, auto& o) {
       o.window = {4, -3};
     },
     ErrorKind::kValue, "window: expected left and right >= -1 (-1 = unbounded), got (4, -3)"},
    {"softcap negative", [](auto&, auto&, auto& o) { o.softcap = -1.f; }, ErrorKind::kValue,
     "softcap: expected a finite value >= 0 (0 = off), got -1"},
    {"softcap inf",
     [](auto&, auto&, auto& o) { o.softcap = std::numeric_limits<float>::infinity(); },
     ErrorKind::kValue, "softcap: expected a finite value >= 0 (0 = off), got inf"},
    {"softcap nan", [](auto&, auto&, auto& o) { o.softcap = std::nanf(""); }, ErrorKind::kValue,
     "softcap: expected a finite value >= 0 (0 = off), got nan"},
    {"scale zero", [](auto&, auto&, auto& o) { o.scale = 0.f; }, ErrorKind::kValue,
     "scale: expected a finite nonzero value (or none: 1/sqrt(head dim)), got 0"},
    {"scale nan", [](auto&, auto&, auto& o) { o.scale = std::nanf(""); }, ErrorKind::kValue,
     "scale: expected a finite nonzero value (or none: 1/sqrt(head dim)), got nan"},
};

TEST(ValidateFwd, DenseRejectsEachBadArgument) {
  expect_rejections(default_dense, std::begin(kDenseRejections), std::end(kDenseRejections));
}

// ------------------------------------------------------------------------------------ varlen

TEST(ValidateFwd, ValidVarlenCallsPass) {
  EXPECT_TRUE(passes([] { validate_fwd(varlen_fwd()); }));
  EXPECT_TRUE(passes([] {
    Fwd f = varlen_fwd();
    f.args.max_seqlen_q = 0;  // unknown: allowed on CPU
    f.args.max_seqlen_k = 0;
    f.args.cu_seqlens_q = f.keep.ints({0, 0, 6});  // empty sequences are fine
    validate_fwd(f);
  }));
  EXPECT_TRUE(passes([] {
    Fwd f = varlen_fwd();
    // cu_seqlens_k as every other element of a longer buffer: strides are honored.
    const TensorView strided = f.keep.ints({0, -1, 4, -1, 9, -1});
    f.args.cu_seqlens_k = with_strides(with_shape(strided, {3}), {2});
    validate_fwd(f);
  }));
}

const FwdRejection kVarlenRejections[] = {
    {"q rank 4",
     [](auto&, auto& a, auto&) {
       a.q = with_shape(a.q, {1, 6, 8, 64});
     },
     ErrorKind::kValue,
     "q: expected rank 3 [total_q, Hq, Dqk] (varlen: cu_seqlens are given), got shape [1, 6, 8, "
     "64]"},
    {"k rank 4",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {1, 9, 2, 64});
     },
     ErrorKind::kValue, "k: expected rank 3 [total_k, Hkv, Dqk], got shape [1, 9, 2, 64]"},
    {"cu_seqlens_k missing", [](auto&, auto& a, auto&) { a.cu_seqlens_k = {}; }, ErrorKind::kValue,
     "cu_seqlens_k: expected a tensor, got none"},
    {"cu_seqlens_q missing", [](auto&, auto& a, auto&) { a.cu_seqlens_q = {}; }, ErrorKind::kValue,
     "cu_seqlens_q: expected a tensor, got none"},
    {"cu_seqlens_q dtype",
     [](auto&, auto& a, auto&) { a.cu_seqlens_q = with_dtype(a.cu_seqlens_q, DType::kFP32); },
     ErrorKind::kType, "cu_seqlens_q: expected int32, got fp32"},
    {"cu_seqlens_q device", [](auto&, auto& a, auto&) { a.cu_seqlens_q = on_cuda(a.cu_seqlens_q); },
     ErrorKind::kType, "cu_seqlens_q: expected a tensor on cpu (q's device), got cuda:0"},
    {"cu_seqlens_q rank",
     [](auto&, auto& a, auto&) {
       a.cu_seqlens_q = with_shape(a.cu_seqlens_q, {1, 3});
     },
     ErrorKind::kValue, "cu_seqlens_q: expected rank 1 [B + 1], got shape [1, 3]"},
    {"cu_seqlens_q empty", [](auto& keep, auto& a, auto&) { a.cu_seqlens_q = keep.ints({}); },
     ErrorKind::kValue, "cu_seqlens_q: expected shape [B + 1] with B >= 0, got shape [0]"},
    {"batch mismatch",
     [](auto& keep, auto& a, auto&) {
       a.cu_seqlens_k = keep.ints({0, 4, 9, 9});
     },
     ErrorKind::kValue,
     "cu_seqlens_k: expected shape [3] ([B + 1] with B = 2 from cu_seqlens_q), got shape [4]"},
    {"first offset",
     [](auto& keep, auto& a, auto&) {
       a.cu_seqlens_q = keep.ints({1, 3, 5});
     },
     ErrorKind::kValue, "cu_seqlens_q[0]: expected 0, got 1"},
    {"decreasing",
     [](auto& keep, auto& a, auto&) {
       a.cu_seqlens_q = keep.ints({0, 3, 2});
     },
     ErrorKind::kValue, "cu_seqlens_q[2]: expected >= cu_seqlens_q[1] = 3 (non-decreasing), got 2"},
    {"past q's rows",
     [](auto& keep, auto& a, auto&) {
       a.cu_seqlens_q = keep.ints({0, 3, 7});
       a.max_seqlen_q = 0;  // unknown
     },
     ErrorKind::kValue, "cu_seqlens_q[2]: expected <= 6 (the rows of q), got 7"},
    {"past k's rows",
     [](auto& keep, auto& a, auto&) {
       a.cu_seqlens_k = keep.ints({0, 4, 10});
       a.max_seqlen_k = 0;  // unknown
     },
     ErrorKind::kValue, "cu_seqlens_k[2]: expected <= 9 (the rows of k), got 10"},
    {"longer than max_seqlen_q", [](auto&, auto& a, auto&) { a.max_seqlen_q = 2; },
     ErrorKind::kValue,
     "cu_seqlens_q: expected lengths <= max_seqlen_q = 2, got 3 (cu_seqlens_q[1] - "
     "cu_seqlens_q[0])"},
    {"longer than max_seqlen_k", [](auto&, auto& a, auto&) { a.max_seqlen_k = 4; },
     ErrorKind::kValue,
     "cu_seqlens_k: expected lengths <= max_seqlen_k = 4, got 5 (cu_seqlens_k[2] - "
     "cu_seqlens_k[1])"},
    {"negative max_seqlen_q", [](auto&, auto& a, auto&) { a.max_seqlen_q = -1; }, ErrorKind::kValue,
     "max_seqlen_q: expected >= 0, got -1"},
};

TEST(ValidateFwd, VarlenRejectsEachBadArgument) {
  expect_rejections(varlen_fwd, std::begin(kVarlenRejections), std::end(kVarlenRejections));
}

// ------------------------------------------------------------------------------------ paged

TEST(ValidateFwd, ValidPagedCallsPass) {
  EXPECT_TRUE(passes([] { validate_fwd(paged_fwd()); }));
  EXPECT_TRUE(passes([] { validate_fwd(csr_fwd()); }));
  EXPECT_TRUE(passes([] {
    Fwd f = paged_fwd();
    f.args.pages.layout = KVLayout::kHND;  // [P, Hkv, page_size, D]
    f.args.k = f.keep.make(kBF16, {6, 2, 4, 64});
    f.args.v = f.keep.make(kBF16, {6, 2, 4, 32});  // Dv may differ from Dqk on CPU
    f.args.out = f.keep.make(kBF16, {5, 8, 32});
    f.args.max_seqlen_k = 12;
    validate_fwd(f);
  }));
  EXPECT_TRUE(passes([] {
    Fwd f = paged_fwd();  // page_size 1 and 256 are both in range
    f.args.k = f.keep.make(kBF16, {1, 256, 2, 64});
    f.args.v = f.keep.make(kBF16, {1, 256, 2, 64});
    f.args.pages.block_table = f.keep.ints({0, 0}, {2, 1});
    validate_fwd(f);
  }));
}

const FwdRejection kPagedRejections[] = {
    {"q rank 4",
     [](auto&, auto& a, auto&) {
       a.q = with_shape(a.q, {1, 5, 8, 64});
     },
     ErrorKind::kValue,
     "q: expected rank 3 [total_q, Hq, Dqk] (a paged KV cache takes varlen q), got shape [1, 5, "
     "8, 64]"},
    {"cu_seqlens_q missing", [](auto&, auto& a, auto&) { a.cu_seqlens_q = {}; }, ErrorKind::kValue,
     "cu_seqlens_q: expected a tensor, got none"},
    {"cu_seqlens_k given",
     [](auto& keep, auto& a, auto&) {
       a.cu_seqlens_k = keep.ints({0, 5, 12});
     },
     ErrorKind::kValue,
     "cu_seqlens_k: expected none with a paged KV cache (kv_lens are the lengths), got shape [3]"},
    {"table and CSR",
     [](auto& keep, auto& a, auto&) {
       a.pages.indptr = keep.ints({0, 2, 5});
       a.pages.indices = keep.ints({0, 1, 3, 4, 5});
     },
     ErrorKind::kValue,
     "page_table: expected a block table [B, max_pages] or page_indptr + page_indices (CSR), got "
     "both"},
    {"kv_lens without a table", [](auto&, auto& a, auto&) { a.pages.block_table = {}; },
     ErrorKind::kValue,
     "page_table: expected a block table [B, max_pages] or page_indptr + page_indices (CSR), got "
     "neither"},
    {"kv_lens missing", [](auto&, auto& a, auto&) { a.pages.kv_lens = {}; }, ErrorKind::kValue,
     "kv_lens: expected a tensor, got none"},
    {"kv_lens dtype",
     [](auto&, auto& a, auto&) { a.pages.kv_lens = with_dtype(a.pages.kv_lens, DType::kInt8); },
     ErrorKind::kType, "kv_lens: expected int32, got int8"},
    {"kv_lens batch",
     [](auto& keep, auto& a, auto&) {
       a.pages.kv_lens = keep.ints({5, 12, 1});
     },
     ErrorKind::kValue, "kv_lens: expected shape [2] ([B] from cu_seqlens_q), got shape [3]"},
    {"table rank",
     [](auto&, auto& a, auto&) { a.pages.block_table = with_shape(a.pages.block_table, {6}); },
     ErrorKind::kValue, "page_table: expected rank 2 [B, max_pages], got shape [6]"},
    {"table batch",
     [](auto&, auto& a, auto&) {
       a.pages.block_table = with_shape(a.pages.block_table, {3, 2});
     },
     ErrorKind::kValue,
     "page_table: expected shape [2, max_pages] ([B] from cu_seqlens_q), got shape [3, 2]"},
    {"table device",
     [](auto&, auto& a, auto&) { a.pages.block_table = on_cuda(a.pages.block_table); },
     ErrorKind::kType, "page_table: expected a tensor on cpu (q's device), got cuda:0"},
    {"page past the pool",
     [](auto& keep, auto& a, auto&) {
       a.pages.block_table = keep.ints({0, 1, -1, 3, 4, 6}, {2, 3});
     },
     ErrorKind::kValue, "page_table[1][2]: expected a page index in [0, 6), got 6"},
    {"negative page in use",
     [](auto& keep, auto& a, auto&) {
       a.pages.block_table = keep.ints({0, -1, 2, 3, 4, 5}, {2, 3});
     },
     ErrorKind::kValue, "page_table[0][1]: expected a page index in [0, 6), got -1"},
    {"negative kv_len",
     [](auto& keep, auto& a, auto&) {
       a.pages.kv_lens = keep.ints({-1, 12});
     },
     ErrorKind::kValue, "kv_lens[0]: expected >= 0, got -1"},
    {"kv_len past its pages",
     [](auto& keep, auto& a, auto&) {
       a.pages.kv_lens = keep.ints({5, 13});
     },
     ErrorKind::kValue,
     "kv_lens[1]: expected <= 12 (page_table rows hold 3 pages of 4 tokens), got 13"},
    {"kv_len past max_seqlen_k", [](auto&, auto& a, auto&) { a.max_seqlen_k = 10; },
     ErrorKind::kValue, "kv_lens[1]: expected <= max_seqlen_k = 10, got 12"},
    {"pool rank",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {6, 4, 128});
     },
     ErrorKind::kValue,
     "k: expected rank 4 [num_pages, page_size, Hkv, D] (NHD), got shape [6, 4, 128]"},
    {"page size 0",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {6, 0, 2, 64});
     },
     ErrorKind::kValue, "k: expected page_size in 1..256, got 0"},
    {"page size 512",
     [](auto&, auto& a, auto&) {
       a.k = with_shape(a.k, {1, 512, 2, 64});
     },
     ErrorKind::kValue, "k: expected page_size in 1..256, got 512"},
    {"v pool",
     [](auto&, auto& a, auto&) {
       a.v = with_shape(a.v, {5, 4, 2, 64});
     },
     ErrorKind::kValue,
     "v: expected shape [6, 4, 2, 64] (k's shape with v's own Dv), got shape [5, 4, 2, 64]"},
    {"HND read as NHD pools",
     [](auto&, auto& a, auto&) { a.pages.layout = KVLayout::kHND; },  // page_size 2 then
     ErrorKind::kValue, "page_table[0][2]: expected a page index in [0, 6), got -1"},
};

TEST(ValidateFwd, PagedRejectsEachBadArgument) {
  expect_rejections(paged_fwd, std::begin(kPagedRejections), std::end(kPagedRejections));
}

const FwdRejection kCsrRejections[] = {
    {"indptr missing", [](auto&, auto& a, auto&) { a.pages.indptr = {}; }, ErrorKind::kValue,
     "page_indptr: expected a tensor, got none"},
    {"indices missing", [](auto&, auto& a, auto&) { a.pages.indices = {}; }, ErrorKind::kValue,
     "page_indices: expected a tensor, got none"},
    {"indptr start",
     [](auto& keep, auto& a, auto&) {
       a.pages.indptr = keep.ints({1, 2, 5});
     },
     ErrorKind::kValue, "page_indptr[0]: expected 0, got 1"},
    {"indptr batch",
     [](auto& keep, auto& a, auto&) {
       a.pages.indptr = keep.ints({0, 5});
     },
     ErrorKind::kValue,
     "page_indptr: expected shape [3] ([B + 1] with B = 2 from cu_seqlens_q), got shape [2]"},
    {"indptr decreasing",
     [](auto& keep, auto& a, auto&) {
       a.pages.indptr = keep.ints({0, 3, 2});
     },
     ErrorKind::kValue, "page_indptr[2]: expected >= page_indptr[1] = 3 (non-decreasing), got 2"},
    {"indptr past indices",
     [](auto& keep, auto& a, auto&) {
       a.pages.indptr = keep.ints({0, 2, 6});
     },
     ErrorKind::kValue, "page_indptr[2]: expected <= 5 (the rows of page_indices), got 6"},
    {"index past the pool",
     [](auto& keep, auto& a, auto&) {
       a.pages.indices = keep.ints({0, 1, 3, 9, 5});
     },
     ErrorKind::kValue,
     "page_indices[3]: expected a page index in [0, 6) (request 1, page 1), got 9"},
    {"kv_len past its pages",
     [](auto& keep, auto& a, auto&) {
       a.pages.kv_lens = keep.ints({9, 12});
     },
     ErrorKind::kValue,
     "kv_lens[0]: expected <= 8 (page_indptr gives this request 2 pages of 4 tokens), got 9"},
};

TEST(ValidateFwd, CsrRejectsEachBadArgument) {
  expect_rejections(csr_fwd, std::begin(kCsrRejections), std::end(kCsrRejections));
}

// ------------------------------------------------------------------------------------ CUDA rules

TEST(ValidateFwd, CudaCallsNeedKernelHeadDims) {
  for (auto [dqk, dv] : {std::pair{64, 64}, {128, 128}, {256, 256}, {192, 128}}) {
    Fwd f = dense_fwd(kBF16, 8, 2, dqk, dv);
    move_to_cuda(f.args);
    EXPECT_TRUE(passes([&] { validate_fwd(f); })) << dqk << ", " << dv;
  }
  Fwd f = dense_fwd(kBF16, 8, 2, 96, 96);
  move_to_cuda(f.args);
  EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kNotImplemented,
                           "hopattn.attention_fwd: head_dim: expected one of 64, 128, 256 or "
                           "(Dqk 192, Dv 128) on CUDA, got 96"));
  Fwd g = dense_fwd(kBF16, 8, 2, 128, 64);
  move_to_cuda(g.args);
  EXPECT_TRUE(throws_error([&] { validate_fwd(g); }, ErrorKind::kNotImplemented,
                           "on CUDA, got (Dqk 128, Dv 64)"));
}

TEST(ValidateFwd, CudaCallsNeed16BitTypes) {
  Fwd f = dense_fwd(kFP32);
  move_to_cuda(f.args);
  EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kType,
                           "q: expected bf16 or fp16 (fp32 on CPU only), got fp32"));
}

TEST(ValidateFwd, CudaCallsNeedTmaLayouts) {
  Fwd f = dense_fwd();
  move_to_cuda(f.args);
  // Padded rows (stride 72 elements = 144 bytes) and size-1 dims with odd strides are fine.
  f.args.k = with_strides(f.args.k, {7 * 2 * 72, 2 * 72, 72, 1});
  EXPECT_TRUE(passes([&] { validate_fwd(f); }));

  Fwd g = dense_fwd();
  move_to_cuda(g.args);
  g.args.q = with_strides(g.args.q, {5 * 8 * 64, 8 * 64, 64, 2});
  EXPECT_TRUE(throws_error([&] { validate_fwd(g); }, ErrorKind::kValue,
                           "q: expected innermost stride 1 on CUDA (TMA), got stride 2"));
  g = dense_fwd();
  move_to_cuda(g.args);
  g.args.k = with_strides(g.args.k, {7 * 2 * 68, 2 * 68, 68, 1});
  EXPECT_TRUE(throws_error(
      [&] { validate_fwd(g); }, ErrorKind::kValue,
      "k: expected stride(2) a multiple of 8 elements (16 bytes) on CUDA (TMA), got 68"));
  g = dense_fwd();
  move_to_cuda(g.args);
  g.args.out = shifted(g.args.out, 2);
  EXPECT_TRUE(
      throws_error([&] { validate_fwd(g); }, ErrorKind::kValue,
                   "out: expected a data pointer aligned to 16 bytes on CUDA (TMA), got 0x"));
  g = dense_fwd();
  move_to_cuda(g.args);
  g.args.v = with_strides(with_shape(g.args.v, {1, 7, 2, 64}), {3, 2 * 64, 64, 1});
  g.args.k = with_shape(g.args.k, {1, 7, 2, 64});
  g.args.q = with_shape(g.args.q, {1, 5, 8, 64});
  g.args.out = with_shape(g.args.out, {1, 5, 8, 64});
  g.args.lse = with_shape(g.args.lse, {1, 5, 8});
  EXPECT_TRUE(passes([&] { validate_fwd(g); })) << "a size-1 dim's stride is never used";
}

TEST(ValidateFwd, CudaCallsKeepEveryTensorOnOneDevice) {
  Fwd f = dense_fwd();
  move_to_cuda(f.args);
  f.args.lse = on_device(f.args.lse, {DeviceType::kCPU, 0});
  EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kType,
                           "lse: expected a tensor on cuda:0 (q's device), got cpu"));
  f = dense_fwd();
  move_to_cuda(f.args);
  f.args.v = on_device(f.args.v, {DeviceType::kCUDA, 1});
  EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kType,
                           "v: expected a tensor on cuda:0 (q's device), got cuda:1"));
}

TEST(ValidateFwd, CudaVarlenNeedsHostBoundsButNeverReadsIndices) {
  for (Fwd (*make)() : {varlen_fwd, paged_fwd}) {
    Fwd f = make();
    f.args.max_seqlen_q = 3;
    f.args.max_seqlen_k = 12;
    // Values that would fail on host: on CUDA they are device memory and never read.
    if (f.args.cu_seqlens_k.defined()) f.args.cu_seqlens_k = f.keep.ints({7, 1, 99});
    if (f.args.pages.defined()) f.args.pages.block_table = f.keep.ints({9, 9, 9, 9, 9, 9}, {2, 3});
    f.args.cu_seqlens_q = f.keep.ints({5, -3, 100});
    move_to_cuda(f.args);
    EXPECT_TRUE(passes([&] { validate_fwd(f); }));

    f.args.max_seqlen_q = 0;
    EXPECT_TRUE(throws_error(
        [&] { validate_fwd(f); }, ErrorKind::kValue,
        "max_seqlen_q: expected > 0 on CUDA (the host bound the kernel's grid is sized from), got "
        "0"));
    f.args.max_seqlen_q = 3;
    f.args.max_seqlen_k = 0;
    EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kValue,
                             "max_seqlen_k: expected > 0 on CUDA"));
  }
}

// ------------------------------------------------------------------------------------ backward

const BwdRejection kBwdRejections[] = {
    {"lse missing", [](auto&, auto& a, auto&) { a.fwd.lse = {}; }, ErrorKind::kValue,
     "hopattn.attention_bwd: lse: expected a tensor, got none"},
    {"window",
     [](auto&, auto&, auto& o) {
       o.window = {-5, -1};
     },
     ErrorKind::kValue, "hopattn.attention_bwd: window: expected left and right >= -1"},
    {"dout missing", [](auto&, auto& a, auto&) { a.dout = {}; }, ErrorKind::kValue,
     "dout: expected a tensor, got none"},
    {"dout dtype", [](auto&, auto& a, auto&) { a.dout = with_dtype(a.dout, kFP16); },
     ErrorKind::kType, "dout: expected bf16 (out's dtype), got fp16"},
    {"dout shape",
     [](auto&, auto& a, auto&) {
       a.dout = with_shape(a.dout, {2, 5, 8, 32});
     },
     ErrorKind::kValue,
     "dout: expected shape [2, 5, 8, 64] (out's shape), got shape [2, 5, 8, 32]"},
    {"dq shape",
     [](auto&, auto& a, auto&) {
       a.dq = with_shape(a.dq, {2, 4, 8, 64});
     },
     ErrorKind::kValue, "dq: expected shape [2, 5, 8, 64] (q's shape), got shape [2, 4, 8, 64]"},
    {"dq dtype", [](auto&, auto& a, auto&) { a.dq = with_dtype(a.dq, kFP32); }, ErrorKind::kType,
     "dq: expected bf16 (q's dtype), got fp32"},
    {"dk shape",
     [](auto&, auto& a, auto&) {
       a.dk = with_shape(a.dk, {2, 7, 8, 64});
     },
     ErrorKind::kValue, "dk: expected shape [2, 7, 2, 64] (k's shape), got shape [2, 7, 8, 64]"},
    {"dv dtype", [](auto&, auto& a, auto&) { a.dv = with_dtype(a.dv, kFP16); }, ErrorKind::kType,
     "dv: expected bf16 (v's dtype), got fp16"},
    {"dv device", [](auto&, auto& a, auto&) { a.dv = on_cuda(a.dv); }, ErrorKind::kType,
     "dv: expected a tensor on cpu (q's device), got cuda:0"},
    {"dsinks shape", [](auto&, auto& a, auto&) { a.dsinks = with_shape(a.dsinks, {4}); },
     ErrorKind::kValue, "dsinks: expected shape [8] ([Hq]), got shape [4]"},
    {"dsinks without sinks", [](auto&, auto& a, auto&) { a.fwd.sinks = {}; }, ErrorKind::kValue,
     "dsinks: expected none (no sinks were given), got shape [8]"},
};

TEST(ValidateBwd, ValidCallsPass) {
  EXPECT_TRUE(passes([] { validate_bwd(dense_bwd()); }));
  EXPECT_TRUE(passes([] {
    Bwd b = dense_bwd();
    b.args.fwd.sinks = {};
    b.args.dsinks = {};
    b.fwd.opts.deterministic = true;
    validate_bwd(b);
  }));
  EXPECT_TRUE(passes([] {
    Bwd b = dense_bwd();
    b.args.dsinks = {};  // sinks without their gradient: dsinks is optional
    validate_bwd(b);
  }));
}

TEST(ValidateBwd, RejectsEachBadArgument) { expect_bwd_rejections(kBwdRejections); }

TEST(ValidateBwd, CudaGradientsNeedTmaLayouts) {
  Bwd b = dense_bwd();
  move_to_cuda(b.args.fwd);
  for (TensorView* t : {&b.args.dout, &b.args.dq, &b.args.dk, &b.args.dv, &b.args.dsinks}) {
    *t = on_cuda(*t);
  }
  // CUDA calls need the workspace attention_bwd_workspace_size reports (never read here).
  std::vector<uint8_t> workspace(hopattn::attention_bwd_workspace_size(b.args, b.fwd.opts));
  b.args.workspace = {workspace.data(), workspace.size()};
  EXPECT_TRUE(passes([&] { validate_bwd(b); }));
  b.args.dq = with_strides(b.args.dq, {5 * 8 * 64, 8 * 64, 64, 3});
  EXPECT_TRUE(throws_error([&] { validate_bwd(b); }, ErrorKind::kValue,
                           "dq: expected innermost stride 1 on CUDA (TMA), got stride 3"));
}

TEST(ValidateBwd, CudaRejectsAPagedCache) {
  Bwd b{paged_fwd(), {}};
  b.fwd.args.max_seqlen_q = 3;
  b.fwd.args.max_seqlen_k = 12;
  move_to_cuda(b.fwd.args);
  TensorKeeper& keep = b.fwd.keep;
  b.args.fwd = b.fwd.args;
  b.args.dout = on_cuda(keep.make(kBF16, {5, 8, 64}));
  b.args.dq = on_cuda(keep.make(kBF16, {5, 8, 64}));
  b.args.dk = on_cuda(keep.make(kBF16, {6, 4, 2, 64}));
  b.args.dv = on_cuda(keep.make(kBF16, {6, 4, 2, 64}));
  EXPECT_TRUE(throws_error([&] { validate_bwd(b); }, ErrorKind::kNotImplemented,
                           "hopattn.attention_bwd: page_table: expected dense or varlen k and v "
                           "on CUDA (the backward has no paged KV cache), got a paged KV cache"));
}

// ------------------------------------------------------------------------------------ public API

// The public entry points validate before they compute: a rejected call leaves its outputs as
// they were. Only the failure path is exercised here; the results belong to the reference tests.
TEST(ValidateFwd, RejectedPublicCallWritesNothing) {
  for (Fwd (*make)() : {default_dense, paged_fwd}) {
    Fwd f = make();
    poison(f.args.out);
    poison(f.args.lse);
    const std::vector<uint8_t> out = bytes_of(f.args.out), lse = bytes_of(f.args.lse);
    if (f.args.pages.defined()) {
      f.args.pages.block_table = f.keep.ints({0, 1, -1, 3, 4, 40}, {2, 3});
    } else {
      f.args.k = with_dtype(f.args.k, kFP16);
    }
    EXPECT_THROW(hopattn::attention_fwd(f.args, f.opts), Error);
    EXPECT_EQ(bytes_of(f.args.out), out);
    EXPECT_EQ(bytes_of(f.args.lse), lse);
  }
}

TEST(ValidateBwd, RejectedPublicCallWritesNothing) {
  Bwd b = dense_bwd();
  std::vector<std::vector<uint8_t>> before;
  for (const TensorView& t : {b.args.dq, b.args.dk, b.args.dv, b.args.dsinks}) {
    poison(t);
    before.push_back(bytes_of(t));
  }
  b.args.dout = with_shape(b.args.dout, {2, 5, 8, 32});
  EXPECT_TRUE(throws_error([&] { hopattn::attention_bwd(b.args, b.fwd.opts); }, ErrorKind::kValue,
                           "hopattn.attention_bwd: dout: expected shape"));
  int i = 0;
  for (const TensorView& t : {b.args.dq, b.args.dk, b.args.dv, b.args.dsinks}) {
    EXPECT_EQ(bytes_of(t), before[i++]);
  }
}

}  // namespace
}  // namespace hopattn::testing
