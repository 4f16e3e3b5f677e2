// Validators of merge_states and merge_states_n: valid calls pass; each rule, broken alone, raises
// the right ErrorKind and message.
#include <gtest/gtest.h>

#include "api/validate.hpp"
#include "hopattn/api.hpp"
#include "validate_testing.hpp"

namespace hopattn::testing {
namespace {

constexpr DType kBF16 = DType::kBF16;
constexpr DType kFP32 = DType::kFP32;

struct NoOptions {};

struct Merge {
  TensorKeeper keep;
  MergeArgs args;
  NoOptions opts;
};

// T 6 tokens, H 4, D 64.
Merge make_merge(DType states = kBF16, DType out = kBF16) {
  Merge f;
  f.args.o_a = f.keep.make(states, {6, 4, 64});
  f.args.lse_a = f.keep.make(kFP32, {6, 4});
  f.args.o_b = f.keep.make(states, {6, 4, 64});
  f.args.lse_b = f.keep.make(kFP32, {6, 4});
  f.args.out = f.keep.make(out, {6, 4, 64});
  f.args.lse = f.keep.make(kFP32, {6, 4});
  return f;
}

struct MergeN {
  TensorKeeper keep;
  MergeNArgs args;
  NoOptions opts;
};

// T 6 tokens, n 3 states, H 4, D 64.
MergeN make_merge_n() {
  MergeN f;
  f.args.o = f.keep.make(kFP32, {6, 3, 4, 64});
  f.args.lse = f.keep.make(kFP32, {6, 3, 4});
  f.args.out = f.keep.make(kBF16, {6, 4, 64});
  f.args.lse_out = f.keep.make(kFP32, {6, 4});
  return f;
}

TEST(ValidateMerge, ValidCallsPass) {
  EXPECT_TRUE(passes([] { validate::merge_states(make_merge().args); }));
  EXPECT_TRUE(passes([] { validate::merge_states(make_merge(kFP32, kBF16).args); }))
      << "fp32 partial states merged into a 16-bit output";
  EXPECT_TRUE(passes([] { validate::merge_states(make_merge(DType::kFP16, kFP32).args); }));
  EXPECT_TRUE(passes([] {
    Merge f = make_merge(kFP32, kBF16);  // fp32 states are fine on CUDA too
    for (TensorView* t :
         {&f.args.o_a, &f.args.lse_a, &f.args.o_b, &f.args.lse_b, &f.args.out, &f.args.lse}) {
      *t = on_cuda(*t);
    }
    validate::merge_states(f.args);
  }));
  EXPECT_TRUE(passes([] { validate::merge_states_n(make_merge_n().args); }));
  EXPECT_TRUE(passes([] {
    MergeN f = make_merge_n();  // a single state is a copy
    f.args.o = with_shape(f.args.o, {6, 1, 4, 64});
    f.args.lse = with_shape(f.args.lse, {6, 1, 4});
    validate::merge_states_n(f.args);
  }));
}

using MergeRejection = Rejection<MergeArgs, NoOptions>;

const MergeRejection kMergeRejections[] = {
    {"o_a missing", [](auto&, auto& a, auto&) { a.o_a = {}; }, ErrorKind::kValue,
     "hopattn.merge_states: o_a: expected a tensor, got none"},
    {"o_a dtype", [](auto&, auto& a, auto&) { a.o_a = with_dtype(a.o_a, DType::kInt8); },
     ErrorKind::kType, "o_a: expected bf16, fp16 or fp32, got int8"},
    {"o_a rank",
     [](auto&, auto& a, auto&) {
       a.o_a = with_shape(a.o_a, {1, 6, 4, 64});
     },
     ErrorKind::kValue, "o_a: expected rank 3 [T, H, D], got shape [1, 6, 4, 64]"},
    {"lse_a missing", [](auto&, auto& a, auto&) { a.lse_a = {}; }, ErrorKind::kValue,
     "lse_a: expected a tensor, got none"},
    {"lse_a dtype", [](auto&, auto& a, auto&) { a.lse_a = with_dtype(a.lse_a, kBF16); },
     ErrorKind::kType, "lse_a: expected fp32, got bf16"},
    {"lse_a shape",
     [](auto&, auto& a, auto&) {
       a.lse_a = with_shape(a.lse_a, {6, 2});
     },
     ErrorKind::kValue, "lse_a: expected shape [6, 4] ([T, H] of o_a), got shape [6, 2]"},
    {"o_b dtype", [](auto&, auto& a, auto&) { a.o_b = with_dtype(a.o_b, kFP32); }, ErrorKind::kType,
     "o_b: expected bf16 (o_a's dtype), got fp32"},
    {"o_b shape",
     [](auto&, auto& a, auto&) {
       a.o_b = with_shape(a.o_b, {6, 4, 32});
     },
     ErrorKind::kValue, "o_b: expected shape [6, 4, 64] (o_a's shape), got shape [6, 4, 32]"},
    {"o_b device", [](auto&, auto& a, auto&) { a.o_b = on_cuda(a.o_b); }, ErrorKind::kType,
     "o_b: expected a tensor on cpu (o_a's device), got cuda:0"},
    {"lse_b shape",
     [](auto&, auto& a, auto&) {
       a.lse_b = with_shape(a.lse_b, {5, 4});
     },
     ErrorKind::kValue, "lse_b: expected shape [6, 4] ([T, H] of o_a), got shape [5, 4]"},
    {"out missing", [](auto&, auto& a, auto&) { a.out = {}; }, ErrorKind::kValue,
     "out: expected a tensor, got none"},
    {"out dtype", [](auto&, auto& a, auto&) { a.out = with_dtype(a.out, DType::kFP8E4M3); },
     ErrorKind::kType, "out: expected bf16, fp16 or fp32, got fp8_e4m3"},
    {"out shape",
     [](auto&, auto& a, auto&) {
       a.out = with_shape(a.out, {6, 8, 64});
     },
     ErrorKind::kValue, "out: expected shape [6, 4, 64] (o_a's shape), got shape [6, 8, 64]"},
    {"lse missing", [](auto&, auto& a, auto&) { a.lse = {}; }, ErrorKind::kValue,
     "lse: expected a tensor, got none"},
    {"lse device", [](auto&, auto& a, auto&) { a.lse = on_cuda(a.lse); }, ErrorKind::kType,
     "lse: expected a tensor on cpu (o_a's device), got cuda:0"},
};

TEST(ValidateMerge, RejectsEachBadArgument) {
  for (const MergeRejection& r : kMergeRejections) {
    Merge f = make_merge();
    r.mutate(f.keep, f.args, f.opts);
    EXPECT_TRUE(throws_error([&] { validate::merge_states(f.args); }, r.kind, r.fragment))
        << r.name;
  }
}

using MergeNRejection = Rejection<MergeNArgs, NoOptions>;

const MergeNRejection kMergeNRejections[] = {
    {"o missing", [](auto&, auto& a, auto&) { a.o = {}; }, ErrorKind::kValue,
     "hopattn.merge_states_n: o: expected a tensor, got none"},
    {"o dtype", [](auto&, auto& a, auto&) { a.o = with_dtype(a.o, DType::kInt32); },
     ErrorKind::kType, "o: expected bf16, fp16 or fp32, got int32"},
    {"o rank",
     [](auto&, auto& a, auto&) {
       a.o = with_shape(a.o, {6, 4, 64});
     },
     ErrorKind::kValue, "o: expected rank 4 [T, n, H, D], got shape [6, 4, 64]"},
    {"no states",
     [](auto&, auto& a, auto&) {
       a.o = with_shape(a.o, {6, 0, 4, 64});
     },
     ErrorKind::kValue, "o: expected n >= 1 states, got 0"},
    {"lse shape",
     [](auto&, auto& a, auto&) {
       a.lse = with_shape(a.lse, {6, 4});
     },
     ErrorKind::kValue, "lse: expected shape [6, 3, 4] ([T, n, H] of o), got shape [6, 4]"},
    {"lse dtype", [](auto&, auto& a, auto&) { a.lse = with_dtype(a.lse, kBF16); }, ErrorKind::kType,
     "lse: expected fp32, got bf16"},
    {"out shape",
     [](auto&, auto& a, auto&) {
       a.out = with_shape(a.out, {6, 3, 4, 64});
     },
     ErrorKind::kValue, "out: expected shape [6, 4, 64] ([T, H, D] of o), got shape [6, 3, 4, 64]"},
    {"out dtype", [](auto&, auto& a, auto&) { a.out = with_dtype(a.out, DType::kInt8); },
     ErrorKind::kType, "out: expected bf16, fp16 or fp32, got int8"},
    {"lse_out missing", [](auto&, auto& a, auto&) { a.lse_out = {}; }, ErrorKind::kValue,
     "lse_out: expected a tensor, got none"},
    {"lse_out shape",
     [](auto&, auto& a, auto&) {
       a.lse_out = with_shape(a.lse_out, {4, 6});
     },
     ErrorKind::kValue, "lse_out: expected shape [6, 4] ([T, H] of o), got shape [4, 6]"},
    {"lse_out device", [](auto&, auto& a, auto&) { a.lse_out = on_cuda(a.lse_out); },
     ErrorKind::kType, "lse_out: expected a tensor on cpu (o's device), got cuda:0"},
};

TEST(ValidateMerge, MergeNRejectsEachBadArgument) {
  for (const MergeNRejection& r : kMergeNRejections) {
    MergeN f = make_merge_n();
    r.mutate(f.keep, f.args, f.opts);
    EXPECT_TRUE(throws_error([&] { validate::merge_states_n(f.args); }, r.kind, r.fragment))
        << r.name;
  }
}

TEST(ValidateMerge, CudaStatesNeedVectorizableLayouts) {
  Merge f = make_merge();
  for (TensorView* t :
       {&f.args.o_a, &f.args.lse_a, &f.args.o_b, &f.args.lse_b, &f.args.out, &f.args.lse}) {
    *t = on_cuda(*t);
  }
  f.args.o_b = with_strides(f.args.o_b, {4 * 64, 64, 2});
  EXPECT_TRUE(throws_error([&] { validate::merge_states(f.args); }, ErrorKind::kValue,
                           "o_b: expected innermost stride 1 on CUDA (TMA), got stride 2"));
}

TEST(ValidateMerge, RejectedPublicCallsWriteNothing) {
  Merge f = make_merge();
  poison(f.args.out);
  poison(f.args.lse);
  const std::vector<uint8_t> out = bytes_of(f.args.out), lse = bytes_of(f.args.lse);
  f.args.lse_b = with_shape(f.args.lse_b, {6, 2});
  EXPECT_THROW(hopattn::merge_states(f.args), Error);
  EXPECT_EQ(bytes_of(f.args.out), out);
  EXPECT_EQ(bytes_of(f.args.lse), lse);

  MergeN g = make_merge_n();
  poison(g.args.out);
  poison(g.args.lse_out);
  const std::vector<uint8_t> out_n = bytes_of(g.args.out), lse_n = bytes_of(g.args.lse_out);
  g.args.lse = with_dtype(g.args.lse, kBF16);
  EXPECT_THROW(hopattn::merge_states_n(g.args), Error);
  EXPECT_EQ(bytes_of(g.args.out), out_n);
  EXPECT_EQ(bytes_of(g.args.lse_out), lse_n);
}

// An output never aliases an input, so merging in place (out = o_a) is rejected rather than
// left to the order in which a kernel happens to read and write.
const MergeRejection kMergeOverlaps[] = {
    {"in place into o_a", [](auto&, auto& a, auto&) { a.out = a.o_a; }, ErrorKind::kValue,
     "hopattn.merge_states: out: expected memory disjoint from the input o_a (no output may alias "
     "an input), got a view sharing memory with o_a"},
    {"lse in place into lse_b", [](auto&, auto& a, auto&) { a.lse = a.lse_b; }, ErrorKind::kValue,
     "lse: expected memory disjoint from the input lse_b"},
    {"lse with a zero stride",
     [](auto&, auto& a, auto&) {
       a.lse = with_strides(a.lse, {0, 1});
     },
     ErrorKind::kValue, "lse: expected an output whose elements do not overlap"},
};

const MergeNRejection kMergeNOverlaps[] = {
    {"lse_out in out's memory",
     [](auto&, auto& a, auto&) {
       a.lse_out = with_shape(with_dtype(a.out, kFP32), {6, 4});
     },
     ErrorKind::kValue,
     "hopattn.merge_states_n: lse_out: expected memory disjoint from out (outputs may not "
     "overlap)"},
    {"out expanded",
     [](auto&, auto& a, auto&) {
       a.out = with_strides(a.out, {64, 0, 1});
     },
     ErrorKind::kValue, "out: expected an output whose elements do not overlap"},
    {"out over o",
     [](auto&, auto& a, auto&) {
       a.out = with_shape(a.o, {6, 4, 64});
     },
     ErrorKind::kValue, "out: expected memory disjoint from the input o"},
};

TEST(ValidateMerge, OverlappingOutputsAreRejected) {
  for (const MergeRejection& r : kMergeOverlaps) {
    Merge f = make_merge();
    r.mutate(f.keep, f.args, f.opts);
    EXPECT_TRUE(throws_error([&] { validate::merge_states(f.args); }, r.kind, r.fragment))
        << r.name;
  }
  for (const MergeNRejection& r : kMergeNOverlaps) {
    MergeN f = make_merge_n();
    r.mutate(f.keep, f.args, f.opts);
    EXPECT_TRUE(throws_error([&] { validate::merge_states_n(f.args); }, r.kind, r.fragment))
        << r.name;
  }
}

}  // namespace
}  // namespace hopattn::testing
