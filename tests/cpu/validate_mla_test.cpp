// Validator of mla: a valid call passes; each rule, broken alone, raises the right ErrorKind and
// message.
#include <gtest/gtest.h>

#include <cmath>

#include "api/validate.hpp"
#include "hopattn/api.hpp"
#include "validate_testing.hpp"

namespace hopattn::testing {
namespace {

constexpr DType kBF16 = DType::kBF16;
constexpr DType kFP32 = DType::kFP32;

struct Mla {
  TensorKeeper keep;
  MlaArgs args;
  MlaOptions opts;
};

// Two requests of 2 and 3 queries, H 4, a latent cache of 6 pages of 16 tokens, kv_lens 20, 10.
Mla make_mla() {
  Mla f;
  f.args.q_nope = f.keep.make(kBF16, {5, 4, 512});
  f.args.q_pe = f.keep.make(kBF16, {5, 4, 64});
  f.args.ckv = f.keep.make(kBF16, {6, 16, 512});
  f.args.kpe = f.keep.make(kBF16, {6, 16, 64});
  f.args.cu_seqlens_q = f.keep.ints({0, 2, 5});
  f.args.pages.block_table = f.keep.ints({0, 1, 2, -1}, {2, 2});
  f.args.pages.kv_lens = f.keep.ints({20, 10});
  f.args.out = f.keep.make(kBF16, {5, 4, 512});
  f.args.lse = f.keep.make(kFP32, {5, 4});
  return f;
}

void move_to_cuda(MlaArgs& a) {
  for (TensorView* t : {&a.q_nope, &a.q_pe, &a.ckv, &a.kpe, &a.cu_seqlens_q, &a.pages.block_table,
                        &a.pages.kv_lens, &a.out, &a.lse}) {
    *t = on_cuda(*t);
  }
}

void validate_mla(const Mla& f) { validate::mla(f.args, f.opts); }

TEST(ValidateMla, ValidCallsPass) {
  EXPECT_TRUE(passes([] { validate_mla(make_mla()); }));
  EXPECT_TRUE(passes([] {
    Mla f = make_mla();
    f.opts.causal = false;
    f.opts.scale = 0.05f;
    f.args.max_seqlen_q = 3;
    f.args.pages.block_table = {};
    f.args.pages.indptr = f.keep.ints({0, 2, 3});
    f.args.pages.indices = f.keep.ints({5, 4, 3});
    validate_mla(f);
  }));
  EXPECT_TRUE(passes([] {
    Mla f = make_mla();
    f.args.max_seqlen_q = 3;
    move_to_cuda(f.args);
    validate_mla(f);
  }));
  EXPECT_TRUE(passes([] {  // a forced schedule, on both devices
    Mla f = make_mla();
    f.opts.schedule = MlaSchedule::kSeesaw;
    f.args.max_seqlen_q = 3;
    validate_mla(f);
    f.opts.schedule = MlaSchedule::kOneConsumer;
    move_to_cuda(f.args);
    validate_mla(f);
    f.opts.schedule = MlaSchedule::kNarrow;  // 3 tokens x 4 heads
    validate_mla(f);
  }));
  EXPECT_TRUE(passes([] {  // narrow over an fp8 cache: up to 32 rows
    Mla f = make_mla();
    f.args.ckv = with_dtype(f.args.ckv, DType::kFP8E4M3);
    f.args.kpe = with_dtype(f.args.kpe, DType::kFP8E4M3);
    f.args.max_seqlen_q = 8;  // x 4 heads
    f.opts.schedule = MlaSchedule::kNarrow;
    validate_mla(f);
    move_to_cuda(f.args);
    validate_mla(f);
  }));
  EXPECT_TRUE(passes([] {  // an fp8 e4m3 cache with its scale, on both devices
    Mla f = make_mla();
    f.args.ckv = with_dtype(f.args.ckv, DType::kFP8E4M3);
    f.args.kpe = with_dtype(f.args.kpe, DType::kFP8E4M3);
    f.args.kv_scale = 0.5f;
    f.args.max_seqlen_q = 3;
    validate_mla(f);
    move_to_cuda(f.args);
    validate_mla(f);
  }));
}

using MlaRejection = Rejection<MlaArgs, MlaOptions>;

const MlaRejection kMlaRejections[] = {
    {"q_nope missing", [](auto&, auto& a, auto&) { a.q_nope = {}; }, ErrorKind::kValue,
     "hopattn.mla: q_nope: expected a tensor, got none"},
    {"q_nope dtype", [](auto&, auto& a, auto&) { a.q_nope = with_dtype(a.q_nope, DType::kInt8); },
     ErrorKind::kType, "q_nope: expected bf16, fp16 or fp32, got int8"},
    {"q_nope rank",
     [](auto&, auto& a, auto&) {
       a.q_nope = with_shape(a.q_nope, {1, 5, 4, 512});
     },
     ErrorKind::kValue, "q_nope: expected rank 3 [total_q, H, 512], got shape [1, 5, 4, 512]"},
    {"latent dim",
     [](auto&, auto& a, auto&) {
       a.q_nope = with_shape(a.q_nope, {5, 4, 256});
     },
     ErrorKind::kValue,
     "q_nope: expected shape [5, 4, 512] ([total_q, H, 512]), got shape [5, 4, 256]"},
    {"no heads",
     [](auto&, auto& a, auto&) {
       a.q_nope = with_shape(a.q_nope, {5, 0, 512});
     },
     ErrorKind::kValue, "q_nope: expected H >= 1 heads, got 0"},
    {"rope dim",
     [](auto&, auto& a, auto&) {
       a.q_pe = with_shape(a.q_pe, {5, 4, 32});
     },
     ErrorKind::kValue, "q_pe: expected shape [5, 4, 64] ([total_q, H, 64]), got shape [5, 4, 32]"},
    {"q_pe dtype", [](auto&, auto& a, auto&) { a.q_pe = with_dtype(a.q_pe, DType::kFP16); },
     ErrorKind::kType, "q_pe: expected bf16 (q_nope's dtype), got fp16"},
    {"HND layout", [](auto&, auto& a, auto&) { a.pages.layout = KVLayout::kHND; },
     ErrorKind::kValue,
     "pages.layout: expected NHD (MLA pages are [num_pages, page_size, D]), got HND"},
    {"ckv missing", [](auto&, auto& a, auto&) { a.ckv = {}; }, ErrorKind::kValue,
     "ckv: expected a tensor, got none"},
    {"ckv dtype", [](auto&, auto& a, auto&) { a.ckv = with_dtype(a.ckv, DType::kFP8E5M2); },
     ErrorKind::kType, "ckv: expected bf16 or fp8_e4m3 (q_nope's dtype or fp8_e4m3), got fp8_e5m2"},
    {"kpe not like an fp8 ckv",
     [](auto&, auto& a, auto&) { a.ckv = with_dtype(a.ckv, DType::kFP8E4M3); }, ErrorKind::kType,
     "kpe: expected fp8_e4m3 (ckv's dtype), got bf16"},
    {"num_splits negative", [](auto&, auto&, auto& o) { o.num_splits = -1; }, ErrorKind::kValue,
     "num_splits: expected 0..128 (0 = chosen by the library), got -1"},
    {"num_splits too many", [](auto&, auto&, auto& o) { o.num_splits = 129; }, ErrorKind::kValue,
     "num_splits: expected 0..128 (0 = chosen by the library), got 129"},
    {"schedule out of range",
     [](auto&, auto&, auto& o) { o.schedule = static_cast<MlaSchedule>(7); }, ErrorKind::kValue,
     "schedule: expected kAuto, kSeesaw, kOneConsumer or kNarrow (0..3), got 7"},
    {"seesaw over an fp8 cache",
     [](auto&, auto& a, auto& o) {
       a.ckv = with_dtype(a.ckv, DType::kFP8E4M3);
       a.kpe = with_dtype(a.kpe, DType::kFP8E4M3);
       o.schedule = MlaSchedule::kSeesaw;
     },
     ErrorKind::kNotImplemented,
     "schedule: expected kAuto, kOneConsumer or kNarrow for an fp8_e4m3 cache (the seesaw schedule "
     "takes 16-bit caches), got kSeesaw"},
    {"narrow over more than 16 rows",
     [](auto&, auto& a, auto& o) {
       a.max_seqlen_q = 9;  // x 4 heads
       o.schedule = MlaSchedule::kNarrow;
     },
     ErrorKind::kNotImplemented,
     "schedule: expected kNarrow for requests of at most 16 rows (max_seqlen_q * heads), got "
     "max_seqlen_q 9 x 4 heads"},
    {"narrow over more than 32 rows, fp8 cache",
     [](auto&, auto& a, auto& o) {
       a.ckv = with_dtype(a.ckv, DType::kFP8E4M3);
       a.kpe = with_dtype(a.kpe, DType::kFP8E4M3);
       a.max_seqlen_q = 9;  // x 4 heads
       o.schedule = MlaSchedule::kNarrow;
     },
     ErrorKind::kNotImplemented,
     "schedule: expected kNarrow for requests of at most 32 rows (max_seqlen_q * heads), got "
     "max_seqlen_q 9 x 4 heads"},
    {"kv_scale zero", [](auto&, auto& a, auto&) { a.kv_scale = 0.f; }, ErrorKind::kValue,
     "kv_scale: expected a finite value > 0, got 0"},
    {"kv_scale NaN", [](auto&, auto& a, auto&) { a.kv_scale = std::nanf(""); }, ErrorKind::kValue,
     "kv_scale: expected a finite value > 0, got nan"},
    {"ckv device", [](auto&, auto& a, auto&) { a.ckv = on_cuda(a.ckv); }, ErrorKind::kType,
     "ckv: expected a tensor on cpu (q_nope's device), got cuda:0"},
    {"ckv rank",
     [](auto&, auto& a, auto&) {
       a.ckv = with_shape(a.ckv, {6, 16, 1, 512});
     },
     ErrorKind::kValue,
     "ckv: expected rank 3 [num_pages, page_size, D], got shape [6, 16, 1, 512]"},
    {"ckv with rope",
     [](auto&, auto& a, auto&) {
       a.ckv = with_shape(a.ckv, {6, 16, 576});
     },
     ErrorKind::kValue,
     "ckv: expected shape [6, 16, 512] ([num_pages, page_size, 512]), got shape [6, 16, 576]"},
    {"ckv page size",
     [](auto&, auto& a, auto&) {
       a.ckv = with_shape(a.ckv, {1, 1024, 512});
     },
     ErrorKind::kValue, "ckv: expected page_size in 1..256, got 1024"},
    {"kpe pages",
     [](auto&, auto& a, auto&) {
       a.kpe = with_shape(a.kpe, {6, 8, 64});
     },
     ErrorKind::kValue,
     "kpe: expected shape [6, 16, 64] ([num_pages, page_size, 64] like ckv), got shape [6, 8, 64]"},
    {"kpe dtype", [](auto&, auto& a, auto&) { a.kpe = with_dtype(a.kpe, kFP32); }, ErrorKind::kType,
     "kpe: expected bf16 (ckv's dtype), got fp32"},
    {"out shape",
     [](auto&, auto& a, auto&) {
       a.out = with_shape(a.out, {5, 4, 576});
     },
     ErrorKind::kValue, "out: expected shape [5, 4, 512] (q_nope's shape), got shape [5, 4, 576]"},
    {"out dtype", [](auto&, auto& a, auto&) { a.out = with_dtype(a.out, DType::kFP16); },
     ErrorKind::kType, "out: expected bf16 (q_nope's dtype), got fp16"},
    {"lse shape",
     [](auto&, auto& a, auto&) {
       a.lse = with_shape(a.lse, {5, 4, 1});
     },
     ErrorKind::kValue, "lse: expected shape [5, 4] ([total_q, H]), got shape [5, 4, 1]"},
    {"lse dtype", [](auto&, auto& a, auto&) { a.lse = with_dtype(a.lse, kBF16); }, ErrorKind::kType,
     "lse: expected fp32, got bf16"},
    {"scale", [](auto&, auto&, auto& o) { o.scale = 0.f; }, ErrorKind::kValue,
     "hopattn.mla: scale: expected a finite nonzero value"},
    {"cu_seqlens_q missing", [](auto&, auto& a, auto&) { a.cu_seqlens_q = {}; }, ErrorKind::kValue,
     "cu_seqlens_q: expected a tensor, got none"},
    {"cu_seqlens_q past q",
     [](auto& keep, auto& a, auto&) {
       a.cu_seqlens_q = keep.ints({0, 2, 6});
     },
     ErrorKind::kValue, "cu_seqlens_q[2]: expected <= 5 (the rows of q_nope), got 6"},
    {"max_seqlen_q", [](auto&, auto& a, auto&) { a.max_seqlen_q = 2; }, ErrorKind::kValue,
     "cu_seqlens_q: expected lengths <= max_seqlen_q = 2, got 3"},
    {"negative max_seqlen_q", [](auto&, auto& a, auto&) { a.max_seqlen_q = -3; }, ErrorKind::kValue,
     "max_seqlen_q: expected >= 0, got -3"},
    {"kv_lens batch", [](auto& keep, auto& a, auto&) { a.pages.kv_lens = keep.ints({20}); },
     ErrorKind::kValue, "kv_lens: expected shape [2] ([B] from cu_seqlens_q), got shape [1]"},
    {"page past the pool",
     [](auto& keep, auto& a, auto&) {
       a.pages.block_table = keep.ints({0, 6, 2, -1}, {2, 2});
     },
     ErrorKind::kValue, "page_table[0][1]: expected a page index in [0, 6), got 6"},
    {"kv_len past its pages",
     [](auto& keep, auto& a, auto&) {
       a.pages.kv_lens = keep.ints({33, 10});
     },
     ErrorKind::kValue,
     "kv_lens[0]: expected <= 32 (page_table rows hold 2 pages of 16 tokens), got 33"},
};

TEST(ValidateMla, RejectsEachBadArgument) {
  for (const MlaRejection& r : kMlaRejections) {
    Mla f = make_mla();
    r.mutate(f.keep, f.args, f.opts);
    EXPECT_TRUE(throws_error([&] { validate_mla(f); }, r.kind, r.fragment)) << r.name;
  }
}

TEST(ValidateMla, CudaRules) {
  Mla f = make_mla();
  move_to_cuda(f.args);
  EXPECT_TRUE(throws_error([&] { validate_mla(f); }, ErrorKind::kValue,
                           "max_seqlen_q: expected > 0 on CUDA"));
  f.args.max_seqlen_q = 3;
  f.args.kpe = with_strides(f.args.kpe, {16 * 68, 68, 1});
  EXPECT_TRUE(throws_error(
      [&] { validate_mla(f); }, ErrorKind::kValue,
      "kpe: expected stride(1) a multiple of 8 elements (16 bytes) on CUDA (TMA), got 68"));
  Mla g = make_mla();
  g.args.max_seqlen_q = 3;
  g.args.q_nope = with_dtype(g.args.q_nope, kFP32);
  move_to_cuda(g.args);
  EXPECT_TRUE(throws_error([&] { validate_mla(g); }, ErrorKind::kType,
                           "q_nope: expected bf16 or fp16 (fp32 on CPU only), got fp32"));
}

TEST(ValidateMla, RejectedPublicCallWritesNothing) {
  Mla f = make_mla();
  poison(f.args.out);
  poison(f.args.lse);
  const std::vector<uint8_t> out = bytes_of(f.args.out), lse = bytes_of(f.args.lse);
  f.args.pages.kv_lens = f.keep.ints({20, 100});
  EXPECT_THROW(hopattn::mla(f.args, f.opts), Error);
  EXPECT_EQ(bytes_of(f.args.out), out);
  EXPECT_EQ(bytes_of(f.args.lse), lse);
}

TEST(ValidateMla, OverlappingOutputsAreRejected) {
  Mla f = make_mla();
  f.args.lse = with_strides(f.args.lse, {1, 0});
  EXPECT_TRUE(throws_error([&] { validate_mla(f); }, ErrorKind::kValue,
                           "hopattn.mla: lse: expected an output whose elements do not overlap"));
  Mla g = make_mla();
  g.args.out = with_shape(g.args.ckv, {5, 4, 512});
  EXPECT_TRUE(throws_error([&] { validate_mla(g); }, ErrorKind::kValue,
                           "out: expected memory disjoint from the input ckv"));
}

}  // namespace
}  // namespace hopattn::testing
