// Validator of decode: a valid call (paged cache, scales, sinks, tree mask, beams) passes; each
// rule, broken alone, raises the right ErrorKind and message.
#include <gtest/gtest.h>

#include <cmath>

#include "api/validate.hpp"
#include "hopattn/api.hpp"
#include "validate_testing.hpp"

namespace hopattn::testing {
namespace {

constexpr DType kBF16 = DType::kBF16;
constexpr DType kFP32 = DType::kFP32;

struct Decode {
  TensorKeeper keep;
  DecodeArgs args;
  DecodeOptions opts;
};

// B = 4 rows of q_len 2, Hq 8, D 64 against an NHD cache of 40 pages of 4 tokens, Hkv 2.
// kv_lens 5, 12, 0 (an idle slot), 6; unused page slots hold -1, which is never read.
Decode make_decode(DType cache_dtype = kBF16, int64_t d = 64) {
  Decode f;
  f.args.q = f.keep.make(kBF16, {4, 2, 8, d});
  f.args.k_cache = f.keep.make(cache_dtype, {40, 4, 2, d});
  f.args.v_cache = f.keep.make(cache_dtype, {40, 4, 2, d});
  f.args.pages.block_table = f.keep.ints({0, 1, -1, 2, 3, 4, -1, -1, -1, 5, 6, -1}, {4, 3});
  f.args.pages.kv_lens = f.keep.ints({5, 12, 0, 6});
  f.args.k_scale.per_head = f.keep.floats({0.5, 2.0});
  f.args.v_scale.value = 0.5f;
  f.args.sinks = f.keep.make(kFP32, {8});
  f.args.tree_mask = f.keep.make(DType::kBool, {4, 2, 2});
  f.args.out = f.keep.make(kBF16, {4, 2, 8, d});
  f.args.lse = f.keep.make(kFP32, {4, 2, 8});
  return f;
}

Decode default_decode() { return make_decode(); }

// Beam search: two requests of two beams; request 0's beams share their first 4 tokens.
Decode beam_decode() {
  Decode f = make_decode();
  f.opts.beam_width = 2;
  f.args.shared_kv_lens = f.keep.ints({4, 0});
  return f;
}

void move_to_cuda(DecodeArgs& a) {
  for (TensorView* t :
       {&a.q, &a.k_cache, &a.v_cache, &a.pages.block_table, &a.pages.indptr, &a.pages.indices,
        &a.pages.kv_lens, &a.k_scale.per_head, &a.v_scale.per_head, &a.sinks, &a.tree_mask,
        &a.shared_kv_lens, &a.out, &a.lse}) {
    *t = on_cuda(*t);
  }
}

void validate_decode(const Decode& f) { validate::decode(f.args, f.opts); }

using DecodeRejection = Rejection<DecodeArgs, DecodeOptions>;

void expect_rejections(Decode (*make)(), const DecodeRejection* begin, const DecodeRejection* end) {
  for (const DecodeRejection* r = begin; r != end; ++r) {
    Decode f = make();
    r->mutate(f.keep, f.args, f.opts);
    EXPECT_TRUE(throws_error([&] { validate_decode(f); }, r->kind, r->fragment)) << r->name;
  }
}

TEST(ValidateDecode, ValidCallsPass) {
  EXPECT_TRUE(passes([] { validate_decode(make_decode()); }));
  for (DType cache : {DType::kFP8E4M3, DType::kFP8E5M2, DType::kInt8}) {
    EXPECT_TRUE(passes([&] { validate_decode(make_decode(cache)); })) << dtype_name(cache);
  }
  EXPECT_TRUE(passes([] { validate_decode(beam_decode()); }));
  EXPECT_TRUE(passes([] {
    Decode f = make_decode();
    // Minimal: no scales tensors, sinks, tree mask; any split count; q_len 16; window + softcap.
    f.args.k_scale = {};
    f.args.v_scale = {};
    f.args.sinks = {};
    f.args.tree_mask = {};
    f.opts.num_splits = 256;
    f.opts.window = {32, -1};
    f.opts.softcap = 50.f;
    f.args.q = f.keep.make(kBF16, {4, 16, 8, 64});
    f.args.out = f.keep.make(kBF16, {4, 16, 8, 64});
    f.args.lse = f.keep.make(kFP32, {4, 16, 8});
    f.args.pages.block_table =
        f.keep.ints({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {4, 4});
    f.args.pages.kv_lens = f.keep.ints({16, 16, 0, 16});
    validate_decode(f);
  }));
  EXPECT_TRUE(passes([] {
    Decode f = make_decode();
    f.args.pages.layout = KVLayout::kHND;
    f.args.k_cache = f.keep.make(kBF16, {40, 2, 4, 64});
    f.args.v_cache = f.keep.make(kBF16, {40, 2, 4, 64});
    validate_decode(f);
  }));
  EXPECT_TRUE(passes([] {
    Decode f = make_decode();
    f.args.pages.block_table = {};
    f.args.pages.indptr = f.keep.ints({0, 2, 5, 5, 7});
    f.args.pages.indices = f.keep.ints({0, 1, 2, 3, 4, 5, 6});
    validate_decode(f);
  }));
  EXPECT_TRUE(passes([] {
    Decode f = make_decode();  // CPU: fp32 q with an fp32 cache, and Dv != D
    f.args.q = f.keep.make(kFP32, {4, 2, 8, 64});
    f.args.k_cache = f.keep.make(kFP32, {40, 4, 2, 64});
    f.args.v_cache = f.keep.make(kFP32, {40, 4, 2, 24});
    f.args.out = f.keep.make(kFP32, {4, 2, 8, 24});
    validate_decode(f);
  }));
}

const DecodeRejection kDecodeRejections[] = {
    {"q rank",
     [](auto&, auto& a, auto&) {
       a.q = with_shape(a.q, {2, 3});
     },
     ErrorKind::kValue, "hopattn.decode: q: expected rank 4 [B, q_len, Hq, D], got shape [2, 3]"},
    {"q dtype", [](auto&, auto& a, auto&) { a.q = with_dtype(a.q, DType::kFP8E5M2); },
     ErrorKind::kType, "q: expected bf16, fp16 or fp32, got fp8_e5m2"},
    {"q_len 0",
     [](auto&, auto& a, auto&) {
       a.q = with_shape(a.q, {4, 0, 8, 64});
     },
     ErrorKind::kValue, "q: expected q_len in 1..16, got 0"},
    {"q_len 17",
     [](auto&, auto& a, auto&) {
       a.q = with_shape(a.q, {4, 17, 8, 64});
     },
     ErrorKind::kValue, "q: expected q_len in 1..16, got 17"},
    {"beam_width 0", [](auto&, auto&, auto& o) { o.beam_width = 0; }, ErrorKind::kValue,
     "beam_width: expected >= 1 and dividing B = 4, got 0"},
    {"beam_width 3", [](auto&, auto&, auto& o) { o.beam_width = 3; }, ErrorKind::kValue,
     "beam_width: expected >= 1 and dividing B = 4, got 3"},
    {"num_splits -1", [](auto&, auto&, auto& o) { o.num_splits = -1; }, ErrorKind::kValue,
     "num_splits: expected 0..256 (0 = chosen by the library), got -1"},
    {"num_splits 257", [](auto&, auto&, auto& o) { o.num_splits = 257; }, ErrorKind::kValue,
     "num_splits: expected 0..256 (0 = chosen by the library), got 257"},
    {"kernel 4", [](auto&, auto&, auto& o) { o.kernel = static_cast<DecodeKernel>(4); },
     ErrorKind::kValue, "kernel: expected kAuto, kTiles, kSmall or kNarrow (0..3), got 4"},
    {"kNarrow over pages of 4",
     [](auto&, auto& a, auto& o) {
       o.kernel = DecodeKernel::kNarrow;
       a.tree_mask = {};
     },
     ErrorKind::kNotImplemented,
     "kernel: expected kNarrow for one beam, no tree mask, q_len * Hq / Hkv <= 8, D = 64 or 128, "
     "a 16-bit cache of q's dtype in pages of a multiple of 16 keys and at most one split, got q "
     "[4, 2, 8, 64] bf16, Hkv 2, k_cache [40, 4, 2, 64] bf16, num_splits 0"},
    {"kSmall with a tree mask", [](auto&, auto&, auto& o) { o.kernel = DecodeKernel::kSmall; },
     ErrorKind::kNotImplemented,
     "kernel: expected kSmall for one beam, no tree mask, q_len * Hq / Hkv <= 16 and D = 64 or "
     "128, got q [4, 2, 8, 64], Hkv 2, a tree mask"},
    {"kSmall over 16 rows",
     [](auto& keep, auto& a, auto& o) {
       o.kernel = DecodeKernel::kSmall;
       a.tree_mask = {};
       a.q = keep.make(kBF16, {4, 2, 18, 64});  // 2 tokens x 9 heads a KV head
       a.out = keep.make(kBF16, {4, 2, 18, 64});
       a.lse = keep.make(kFP32, {4, 2, 18});
       a.sinks = keep.make(kFP32, {18});
     },
     ErrorKind::kNotImplemented,
     "kernel: expected kSmall for one beam, no tree mask, q_len * Hq / Hkv <= 16 and D = 64 or "
     "128, got q [4, 2, 18, 64], Hkv 2"},
    {"window",
     [](auto&, auto&, auto& o) {
       o.window = {-1, -4};
     },
     ErrorKind::kValue,
     "hopattn.decode: window: expected left and right >= -1 (-1 = unbounded), got (-1, -4)"},
    {"softcap", [](auto&, auto&, auto& o) { o.softcap = -2.f; }, ErrorKind::kValue,
     "hopattn.decode: softcap: expected a finite value >= 0 (0 = off), got -2"},
    {"scale", [](auto&, auto&, auto& o) { o.scale = INFINITY; }, ErrorKind::kValue,
     "hopattn.decode: scale: expected a finite nonzero value (or none: 1/sqrt(head dim)), got inf"},
    {"k_cache missing", [](auto&, auto& a, auto&) { a.k_cache = {}; }, ErrorKind::kValue,
     "k_cache: expected a tensor, got none"},
    {"v_cache missing", [](auto&, auto& a, auto&) { a.v_cache = {}; }, ErrorKind::kValue,
     "v_cache: expected a tensor, got none"},
    {"k_cache other 16-bit type",
     [](auto&, auto& a, auto&) { a.k_cache = with_dtype(a.k_cache, DType::kFP16); },
     ErrorKind::kType,
     "k_cache: expected bf16, fp8_e4m3, fp8_e5m2 or int8 (q's dtype or 8-bit), got fp16"},
    {"v_cache unlike k_cache",
     [](auto&, auto& a, auto&) {
       a.k_cache = with_dtype(a.k_cache, DType::kFP8E4M3);
       a.v_cache = with_dtype(a.v_cache, DType::kInt8);
     },
     ErrorKind::kType, "v_cache: expected fp8_e4m3 (k_cache's dtype), got int8"},
    {"k_cache device", [](auto&, auto& a, auto&) { a.k_cache = on_cuda(a.k_cache); },
     ErrorKind::kType, "k_cache: expected a tensor on cpu (q's device), got cuda:0"},
    {"k_cache rank",
     [](auto&, auto& a, auto&) {
       a.k_cache = with_shape(a.k_cache, {40, 4, 128});
     },
     ErrorKind::kValue,
     "k_cache: expected rank 4 [num_pages, page_size, Hkv, D] (NHD), got shape [40, 4, 128]"},
    {"k_cache head dim",
     [](auto&, auto& a, auto&) {
       a.k_cache = with_shape(a.k_cache, {40, 4, 2, 32});
     },
     ErrorKind::kValue,
     "k_cache: expected shape [40, 4, 2, 64] (pages with q's D), got shape [40, 4, 2, 32]"},
    {"v_cache pages",
     [](auto&, auto& a, auto&) {
       a.v_cache = with_shape(a.v_cache, {8, 4, 2, 64});
     },
     ErrorKind::kValue,
     "v_cache: expected shape [40, 4, 2, 64] (k_cache's shape with v_cache's own D), got shape [8, "
     "4, 2, 64]"},
    {"page_size 300",
     [](auto&, auto& a, auto&) {
       a.k_cache = with_shape(a.k_cache, {40, 300, 2, 64});
     },
     ErrorKind::kValue, "k_cache: expected page_size in 1..256, got 300"},
    {"GQA ratio",
     [](auto&, auto& a, auto&) {
       a.k_cache = with_shape(a.k_cache, {40, 4, 3, 64});
       a.v_cache = with_shape(a.v_cache, {40, 4, 3, 64});
     },
     ErrorKind::kValue,
     "k_cache: expected a KV head count Hkv >= 1 that divides Hq = 8, got Hkv = 3"},
    {"head dim",
     [](auto&, auto& a, auto&) {
       a.v_cache = with_shape(a.v_cache, {40, 4, 2, 1025});
     },
     ErrorKind::kValue, "head_dim: expected Dqk and Dv in 1..1024, got (Dqk 64, Dv 1025)"},
    {"out dtype", [](auto&, auto& a, auto&) { a.out = with_dtype(a.out, DType::kFP16); },
     ErrorKind::kType, "out: expected bf16 (q's dtype), got fp16"},
    {"out shape",
     [](auto&, auto& a, auto&) {
       a.out = with_shape(a.out, {4, 1, 8, 64});
     },
     ErrorKind::kValue,
     "out: expected shape [4, 2, 8, 64] (q's shape with v_cache's D last), got shape [4, 1, 8, "
     "64]"},
    {"lse missing", [](auto&, auto& a, auto&) { a.lse = {}; }, ErrorKind::kValue,
     "lse: expected a tensor, got none"},
    {"lse shape",
     [](auto&, auto& a, auto&) {
       a.lse = with_shape(a.lse, {4, 8});
     },
     ErrorKind::kValue, "lse: expected shape [4, 2, 8] ([B, q_len, Hq]), got shape [4, 8]"},
    {"sinks shape", [](auto&, auto& a, auto&) { a.sinks = with_shape(a.sinks, {2}); },
     ErrorKind::kValue, "sinks: expected shape [8] ([Hq]), got shape [2]"},
    {"tree_mask dtype",
     [](auto&, auto& a, auto&) { a.tree_mask = with_dtype(a.tree_mask, DType::kInt8); },
     ErrorKind::kType, "tree_mask: expected bool, got int8"},
    {"tree_mask shape",
     [](auto&, auto& a, auto&) {
       a.tree_mask = with_shape(a.tree_mask, {4, 2, 3});
     },
     ErrorKind::kValue,
     "tree_mask: expected shape [4, 2, 2] ([B, q_len, q_len]), got shape [4, 2, 3]"},
    {"tree_mask device", [](auto&, auto& a, auto&) { a.tree_mask = on_cuda(a.tree_mask); },
     ErrorKind::kType, "tree_mask: expected a tensor on cpu (q's device), got cuda:0"},
    {"k_scale zero", [](auto&, auto& a, auto&) { a.k_scale.value = 0.f; }, ErrorKind::kValue,
     "k_scale: expected a finite value > 0, got 0"},
    {"v_scale negative", [](auto&, auto& a, auto&) { a.v_scale.value = -1.f; }, ErrorKind::kValue,
     "v_scale: expected a finite value > 0, got -1"},
    {"v_scale nan", [](auto&, auto& a, auto&) { a.v_scale.value = NAN; }, ErrorKind::kValue,
     "v_scale: expected a finite value > 0, got nan"},
    {"per-head scale shape",
     [](auto&, auto& a, auto&) { a.k_scale.per_head = with_shape(a.k_scale.per_head, {8}); },
     ErrorKind::kValue, "k_scale: expected shape [2] (per-head scales [Hkv]), got shape [8]"},
    {"per-head scale dtype",
     [](auto&, auto& a, auto&) { a.k_scale.per_head = with_dtype(a.k_scale.per_head, kBF16); },
     ErrorKind::kType, "k_scale: expected fp32, got bf16"},
    {"no page table", [](auto&, auto& a, auto&) { a.pages.block_table = {}; }, ErrorKind::kValue,
     "page_table: expected a block table [B, max_pages] or page_indptr + page_indices (CSR), got "
     "neither"},
    {"page past the pool",
     [](auto& keep, auto& a, auto&) {
       a.pages.block_table = keep.ints({0, 1, -1, 2, 3, 4, -1, -1, -1, 5, 57, -1}, {4, 3});
     },
     ErrorKind::kValue,
     "hopattn.decode: page_table[3][1]: expected a page index in [0, 40), got 57"},
    {"kv_lens batch",
     [](auto& keep, auto& a, auto&) {
       a.pages.kv_lens = keep.ints({5, 12, 0});
     },
     ErrorKind::kValue, "kv_lens: expected shape [4] ([B] from q), got shape [3]"},
    {"kv_len past its pages",
     [](auto& keep, auto& a, auto&) {
       a.pages.kv_lens = keep.ints({5, 13, 0, 6});
     },
     ErrorKind::kValue,
     "kv_lens[1]: expected <= 12 (page_table rows hold 3 pages of 4 tokens), got 13"},
    {"kv_len short of q_len",
     [](auto& keep, auto& a, auto&) {
       a.pages.block_table = keep.ints({0, 1, -1, 2, 3, 4, 7, -1, -1, 5, 6, -1}, {4, 3});
       a.pages.kv_lens = keep.ints({5, 12, 1, 6});
     },
     ErrorKind::kValue,
     "kv_lens[2]: expected 0 (an idle slot) or >= q_len = 2 (kv_lens count the new tokens), got "
     "1"},
};

TEST(ValidateDecode, RejectsEachBadArgument) {
  expect_rejections(default_decode, std::begin(kDecodeRejections), std::end(kDecodeRejections));
}

// Either kernel may be forced where the small-grid one takes the call (the CPU reference ignores
// the choice; on CUDA the plan follows it).
TEST(ValidateDecode, EitherKernelWhereTheSmallOneTakesTheCall) {
  for (DecodeKernel k : {DecodeKernel::kAuto, DecodeKernel::kTiles, DecodeKernel::kSmall}) {
    Decode f = default_decode();
    f.args.tree_mask = {};
    f.opts.kernel = k;
    EXPECT_TRUE(passes([&] { validate_decode(f); })) << static_cast<int>(k);
    move_to_cuda(f.args);
    EXPECT_TRUE(passes([&] { validate_decode(f); })) << static_cast<int>(k);
  }
}

// The narrow kernel where it takes the call (pages of 16, <= 8 rows, a 16-bit cache of q's dtype,
// one split), rejected where it does not.
TEST(ValidateDecode, NarrowKernelWhereItTakesTheCall) {
  auto narrow = [](DType cache, int splits) {
    Decode f = make_decode(cache);
    f.args.tree_mask = {};
    f.args.k_cache = f.keep.make(cache, {40, 16, 2, 64});
    f.args.v_cache = f.keep.make(cache, {40, 16, 2, 64});
    f.opts.kernel = DecodeKernel::kNarrow;
    f.opts.num_splits = splits;
    return f;
  };
  for (int splits : {0, 1}) {
    Decode f = narrow(kBF16, splits);
    EXPECT_TRUE(passes([&] { validate_decode(f); })) << splits;
    move_to_cuda(f.args);
    EXPECT_TRUE(passes([&] { validate_decode(f); })) << splits;
  }
  for (const auto& [cache, splits] : {std::pair{kBF16, 2}, std::pair{DType::kFP8E4M3, 0}}) {
    const Decode f = narrow(cache, splits);
    EXPECT_TRUE(throws_error([&] { validate_decode(f); }, ErrorKind::kNotImplemented,
                             "kernel: expected kNarrow"))
        << dtype_name(cache) << " " << splits;
  }
}

const DecodeRejection kBeamRejections[] = {
    {"shared_kv_lens shape",
     [](auto& keep, auto& a, auto&) {
       a.shared_kv_lens = keep.ints({4, 0, 0, 0});
     },
     ErrorKind::kValue,
     "shared_kv_lens: expected shape [2] ([B / beam_width] = 4 / 2), got shape [4]"},
    {"shared_kv_lens dtype",
     [](auto&, auto& a, auto&) { a.shared_kv_lens = with_dtype(a.shared_kv_lens, kFP32); },
     ErrorKind::kType, "shared_kv_lens: expected int32, got fp32"},
    {"shared_kv_lens device",
     [](auto&, auto& a, auto&) { a.shared_kv_lens = on_cuda(a.shared_kv_lens); }, ErrorKind::kType,
     "shared_kv_lens: expected a tensor on cpu (q's device), got cuda:0"},
    {"prefix longer than a beam",
     [](auto& keep, auto& a, auto&) {
       a.shared_kv_lens = keep.ints({6, 0});
     },
     ErrorKind::kValue,
     "shared_kv_lens[0]: expected 0..5 (the shortest kv_len among request 0's beams), got 6"},
    {"negative prefix",
     [](auto& keep, auto& a, auto&) {
       a.shared_kv_lens = keep.ints({4, -1});
     },
     ErrorKind::kValue,
     "shared_kv_lens[1]: expected 0..0 (the shortest kv_len among request 1's beams), got -1"},
    {"beam_width against shared_kv_lens", [](auto&, auto&, auto& o) { o.beam_width = 4; },
     ErrorKind::kValue,
     "shared_kv_lens: expected shape [1] ([B / beam_width] = 4 / 4), got shape [2]"},
};

TEST(ValidateDecode, BeamSearchRejectsEachBadArgument) {
  expect_rejections(beam_decode, std::begin(kBeamRejections), std::end(kBeamRejections));
}

// The CUDA rules below size the workspace through the decode planner (src/plan), a host function
// of the shapes: they hold the same in builds with and without CUDA.
TEST(ValidateDecode, CudaCallsNeedKernelHeadDims) {
  for (int64_t d : {64, 128, 256}) {
    Decode f = make_decode(DType::kFP8E4M3, d);
    move_to_cuda(f.args);
    EXPECT_TRUE(passes([&] { validate_decode(f); })) << d;
  }
  Decode f = make_decode(kBF16, 96);
  move_to_cuda(f.args);
  EXPECT_TRUE(
      throws_error([&] { validate_decode(f); }, ErrorKind::kNotImplemented,
                   "hopattn.decode: head_dim: expected one of 64, 128, 256 on CUDA, got 96"));
  f = make_decode(kBF16, 128);
  f.args.v_cache = f.keep.make(kBF16, {40, 4, 2, 64});
  f.args.out = f.keep.make(kBF16, {4, 2, 8, 64});
  move_to_cuda(f.args);
  EXPECT_TRUE(throws_error([&] { validate_decode(f); }, ErrorKind::kNotImplemented,
                           "head_dim: expected one of 64, 128, 256 on CUDA, got (Dqk 128, Dv 64)"));
}

// A view of `t`'s shape and device over a buffer of its own whose rows hold `row` elements: a
// padded pool whose span stays inside its allocation. (Restriding `t` in place reached past its
// buffer, into whatever the heap put there; now and then that was `out`, and the aliasing rule
// rejected the call.)
TensorView padded_rows(TensorKeeper& keep, const TensorView& t, int64_t row) {
  std::vector<int64_t> shape = shape_of(t);
  shape.back() = row;
  const TensorView buffer = keep.make(t.dtype(), shape);
  return remade(t, buffer.data(), t.dtype(), shape_of(t), strides_of(buffer), t.device());
}

TEST(ValidateDecode, CudaCachesNeedTmaLayouts) {
  // fp8 pages: 16-byte strides are 16 elements, so a row padded to 72 elements is misaligned
  // while one padded to 80 is fine.
  Decode f = make_decode(DType::kFP8E4M3);
  move_to_cuda(f.args);
  f.args.k_cache = padded_rows(f.keep, f.args.k_cache, 80);
  EXPECT_TRUE(passes([&] { validate_decode(f); }));
  f.args.v_cache = padded_rows(f.keep, f.args.v_cache, 72);
  EXPECT_TRUE(throws_error(
      [&] { validate_decode(f); }, ErrorKind::kValue,
      "v_cache: expected stride(2) a multiple of 16 elements (16 bytes) on CUDA (TMA), got 72"));

  Decode g = make_decode();
  move_to_cuda(g.args);
  g.args.q = shifted(g.args.q, 8);
  EXPECT_TRUE(throws_error([&] { validate_decode(g); }, ErrorKind::kValue,
                           "q: expected a data pointer aligned to 16 bytes on CUDA (TMA)"));
}

TEST(ValidateDecode, CudaCallsNeverReadIndexValues) {
  Decode f = beam_decode();
  // Nor scale and sink values: reading device memory would synchronize (README, Safety).
  f.args.k_scale.per_head = f.keep.floats({NAN, -1.0});
  f.args.v_scale.per_head = f.keep.floats({0.0, INFINITY});
  f.args.sinks = f.keep.floats({NAN, INFINITY, 0, 0, 0, 0, 0, 0});
  f.args.pages.block_table = f.keep.ints({99, -5, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, {4, 3});
  f.args.pages.kv_lens = f.keep.ints({-3, 1000, 1, 1});
  f.args.shared_kv_lens = f.keep.ints({500, -2});
  move_to_cuda(f.args);
  EXPECT_TRUE(passes([&] { validate_decode(f); }));
}

// A page index past the pool would make the reference (or a kernel) read out of bounds: the
// public call must stop at validation, before touching the cache or the outputs.
TEST(ValidateDecode, RejectedPublicCallWritesNothing) {
  Decode f = make_decode();
  poison(f.args.out);
  poison(f.args.lse);
  const std::vector<uint8_t> out = bytes_of(f.args.out), lse = bytes_of(f.args.lse);
  f.args.pages.block_table = f.keep.ints({0, 1, -1, 2, 3, 4, -1, -1, -1, 5, 1 << 30, -1}, {4, 3});
  EXPECT_TRUE(throws_error([&] { hopattn::decode(f.args, f.opts); }, ErrorKind::kValue,
                           "page_table[3][1]: expected a page index in [0, 40), got 1073741824"));
  EXPECT_EQ(bytes_of(f.args.out), out);
  EXPECT_EQ(bytes_of(f.args.lse), lse);
}

// Outputs may overlap neither themselves, nor each other, nor an input (validate_common.hpp).
const DecodeRejection kOverlaps[] = {
    {"out expanded over q_len",
     [](auto&, auto& a, auto&) {
       a.out = with_strides(a.out, {2 * 8 * 64, 0, 64, 1});
     },
     ErrorKind::kValue,
     "hopattn.decode: out: expected an output whose elements do not overlap (no zero or "
     "overlapping strides), got strides [1024, 0, 64, 1] for shape [4, 2, 8, 64]"},
    {"lse in out's memory",
     [](auto&, auto& a, auto&) {
       a.lse = with_shape(with_dtype(a.out, kFP32), {4, 2, 8});
     },
     ErrorKind::kValue, "lse: expected memory disjoint from out (outputs may not overlap)"},
    {"out is q", [](auto&, auto& a, auto&) { a.out = a.q; }, ErrorKind::kValue,
     "out: expected memory disjoint from the input q (no output may alias an input)"},
    {"lse over the sinks", [](auto&, auto& a, auto&) { a.sinks = with_shape(a.lse, {8}); },
     ErrorKind::kValue, "lse: expected memory disjoint from the input sinks"},
    {"out over the cache",
     [](auto&, auto& a, auto&) {
       a.out = with_shape(a.v_cache, {4, 2, 8, 64});
     },
     ErrorKind::kValue, "out: expected memory disjoint from the input v_cache"},
};

TEST(ValidateDecode, OverlappingOutputsAreRejected) {
  expect_rejections(default_decode, std::begin(kOverlaps), std::end(kOverlaps));
}

// Host-resident per-head scales and sinks are values the host can check without a sync: a bad
// one would turn a head's rows into NaN (or empty them) instead of raising.
const DecodeRejection kHostValues[] = {
    {"k_scale[1] nan",
     [](auto& k, auto& a, auto&) {
       a.k_scale.per_head = k.floats({1.0, NAN});
     },
     ErrorKind::kValue, "hopattn.decode: k_scale[1]: expected a finite value > 0, got nan"},
    {"k_scale[0] inf",
     [](auto& k, auto& a, auto&) {
       a.k_scale.per_head = k.floats({INFINITY, 1.0});
     },
     ErrorKind::kValue, "k_scale[0]: expected a finite value > 0, got inf"},
    {"v_scale[0] zero",
     [](auto& k, auto& a, auto&) {
       a.v_scale.per_head = k.floats({0.0, 1.0});
     },
     ErrorKind::kValue, "v_scale[0]: expected a finite value > 0, got 0"},
    {"v_scale[1] negative",
     [](auto& k, auto& a, auto&) {
       a.v_scale.per_head = k.floats({1.0, -0.5});
     },
     ErrorKind::kValue, "v_scale[1]: expected a finite value > 0, got -0.5"},
    {"sinks[3] nan",
     [](auto& k, auto& a, auto&) {
       a.sinks = k.floats({0, 0, 0, NAN, 0, 0, 0, 0});
     },
     ErrorKind::kValue,
     "hopattn.decode: sinks[3]: expected a finite logit or -inf (no sink), got nan"},
    {"sinks[0] +inf",
     [](auto& k, auto& a, auto&) {
       a.sinks = k.floats({INFINITY, 0, 0, 0, 0, 0, 0, 0});
     },
     ErrorKind::kValue, "sinks[0]: expected a finite logit or -inf (no sink), got inf"},
};

TEST(ValidateDecode, BadHostScalesAndSinksAreRejected) {
  expect_rejections(default_decode, std::begin(kHostValues), std::end(kHostValues));
  Decode f = make_decode();
  f.args.sinks = f.keep.floats({-INFINITY, 1, -2, 0, 0, 0, 0, 30});  // -inf: that head has none
  EXPECT_TRUE(passes([&] { validate_decode(f); }));
}

}  // namespace
}  // namespace hopattn::testing
