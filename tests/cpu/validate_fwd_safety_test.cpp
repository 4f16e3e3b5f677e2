// Validators of attention_fwd and attention_bwd against hostile arguments: outputs that overlap
// themselves, each other or an input; sink values the host can read (validate_fwd_test.cpp holds
// the per-argument rules).
#include <gtest/gtest.h>

#include <cmath>

#include "api/validate.hpp"
#include "hopattn/api.hpp"
#include "validate_fwd_cases.hpp"
#include "validate_testing.hpp"

namespace hopattn::testing {
namespace {

// ------------------------------------------------------------------------------------ overlap

const FwdRejection kFwdOverlaps[] = {
    {"out with a zero stride (expand)",
     [](auto&, auto& a, auto&) {
       a.out = with_strides(a.out, {5 * 8 * 64, 0, 64, 1});
     },
     ErrorKind::kValue,
     "hopattn.attention_fwd: out: expected an output whose elements do not overlap (no zero or "
     "overlapping strides), got strides [2560, 0, 64, 1] for shape [2, 5, 8, 64]"},
    {"lse with overlapping strides",
     [](auto&, auto& a, auto&) {
       a.lse = with_strides(a.lse, {40, 4, 1});
     },
     ErrorKind::kValue, "lse: expected an output whose elements do not overlap"},
    {"lse in out's memory",
     [](auto& keep, auto& a, auto&) {
       a.out = keep.make(kFP32, {2, 5, 8, 64});
       a.q = keep.make(kFP32, {2, 5, 8, 64});
       a.k = keep.make(kFP32, {2, 7, 2, 64});
       a.v = keep.make(kFP32, {2, 7, 2, 64});
       a.lse = with_shape(a.out, {2, 5, 8});
     },
     ErrorKind::kValue,
     "lse: expected memory disjoint from out (outputs may not overlap), got a view sharing memory "
     "with out"},
    {"out is q", [](auto&, auto& a, auto&) { a.out = a.q; }, ErrorKind::kValue,
     "out: expected memory disjoint from the input q (no output may alias an input), got a view "
     "sharing memory with q"},
    {"lse over the sinks", [](auto&, auto& a, auto&) { a.sinks = with_shape(a.lse, {8}); },
     ErrorKind::kValue, "lse: expected memory disjoint from the input sinks"},
};

TEST(ValidateFwdSafety, OverlappingOutputsAreRejected) {
  for (const FwdRejection& r : kFwdOverlaps) {
    Fwd f = dense_fwd();
    r.mutate(f.keep, f.args, f.opts);
    EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, r.kind, r.fragment)) << r.name;
  }
}

TEST(ValidateFwdSafety, OutputsOverAnIndexTensorAreRejected) {
  Fwd f = paged_fwd();
  // lse [5, 8] fp32 viewed over page memory it would overwrite mid-call.
  HostTensor shared = int_tensor(std::vector<int32_t>(40, 0), {5, 8});
  f.args.lse = with_dtype(shared.view(), kFP32);
  f.args.pages.kv_lens = with_shape(shared.view(), {2});
  f.args.pages.block_table = f.keep.ints({0, 1, -1, 3, 4, 5}, {2, 3});
  EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kValue,
                           "lse: expected memory disjoint from the input kv_lens"));
}

TEST(ValidateFwdSafety, DisjointViewsOfOnePackedBufferPass) {
  // q, k, v, out as slices of packed buffers: [B, S, 2, H, D] holds k and v side by side.
  Fwd f = dense_fwd(kBF16, 2, 2);
  HostTensor kv(kBF16, {2, 7, 2, 2, 64});
  const std::vector<int64_t> kv_strides = {7 * 2 * 2 * 64, 2 * 2 * 64, 64, 1};
  f.args.k = with_strides(with_shape(kv.view(), {2, 7, 2, 64}), kv_strides);
  f.args.v = shifted(f.args.k, 2 * 64 * 2);
  // out and lse: each its own buffer; out's rows strided (a view into a larger buffer).
  HostTensor out(kBF16, {2, 5, 2, 128});
  f.args.out = with_strides(with_shape(out.view(), {2, 5, 2, 64}), {5 * 2 * 128, 2 * 128, 128, 1});
  EXPECT_TRUE(passes([&] { validate_fwd(f); }));
  f.args.k = f.args.v;  // k and v may be one tensor: inputs may alias each other
  EXPECT_TRUE(passes([&] { validate_fwd(f); }));
}

const BwdRejection kBwdOverlaps[] = {
    {"dq with a zero stride",
     [](auto&, auto& a, auto&) {
       a.dq = with_strides(a.dq, {0, 8 * 64, 64, 1});
     },
     ErrorKind::kValue,
     "hopattn.attention_bwd: dq: expected an output whose elements do not overlap"},
    {"dk overlapping dq",
     [](auto&, auto& a, auto&) {
       a.dk = with_shape(a.dq, {2, 7, 2, 64});
     },
     ErrorKind::kValue, "dk: expected memory disjoint from dq (outputs may not overlap)"},
    {"dv is dk", [](auto&, auto& a, auto&) { a.dv = a.dk; }, ErrorKind::kValue,
     "dv: expected memory disjoint from dk"},
    {"dsinks over lse", [](auto&, auto& a, auto&) { a.dsinks = with_shape(a.fwd.lse, {8}); },
     ErrorKind::kValue, "dsinks: expected memory disjoint from the input lse"},
    {"dq over dout", [](auto&, auto& a, auto&) { a.dq = a.dout; }, ErrorKind::kValue,
     "dq: expected memory disjoint from the input dout"},
    {"dv over out",
     [](auto&, auto& a, auto&) {
       a.dv = with_shape(a.fwd.out, {2, 7, 2, 64});
     },
     ErrorKind::kValue, "dv: expected memory disjoint from the input out"},
};

TEST(ValidateBwdSafety, OverlappingGradientsAreRejected) { expect_bwd_rejections(kBwdOverlaps); }

TEST(ValidateBwdSafety, DkAndDvOfOnePackedBufferPass) {
  Bwd b = dense_bwd();
  HostTensor dkv(kBF16, {2, 7, 2, 2, 64});
  b.args.dk = with_strides(with_shape(dkv.view(), {2, 7, 2, 64}), {7 * 256, 256, 64, 1});
  b.args.dv = shifted(b.args.dk, 2 * 64 * 2);
  EXPECT_TRUE(passes([&] { validate_bwd(b); }));
  b.args.dv = shifted(b.args.dk, 64 * 2);  // one head over: dv's head 0 is dk's head 1
  EXPECT_TRUE(throws_error([&] { validate_bwd(b); }, ErrorKind::kValue,
                           "dv: expected memory disjoint from dk"));
}

// ------------------------------------------------------------------------------------ values

TEST(ValidateFwdSafety, HostSinksMustBeFiniteOrMinusInfinity) {
  for (double bad : {double(NAN), double(INFINITY)}) {
    Fwd f = dense_fwd();
    f.args.sinks = f.keep.floats({0, 1, 2, bad, 0, 0, 0, 0});
    EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kValue,
                             "hopattn.attention_fwd: sinks[3]: expected a finite logit or -inf "
                             "(no sink), got "))
        << bad;
    Bwd b = dense_bwd();
    b.args.fwd.sinks = f.args.sinks;
    EXPECT_TRUE(throws_error([&] { validate_bwd(b); }, ErrorKind::kValue,
                             "hopattn.attention_bwd: sinks[3]: expected a finite logit"))
        << bad;
  }
  Fwd f = dense_fwd();
  f.args.sinks = f.keep.floats({-INFINITY, -1e30, 1e30, 0, 0, 0, 0, 0});
  EXPECT_TRUE(passes([&] { validate_fwd(f); }));
}

// ------------------------------------------------------------------------------------ sizes

TEST(ValidateFwdSafety, OffsetsThatOverflowInt64AreRejected) {
  Fwd f = dense_fwd();
  // The last element of q sits 2^62 elements = 2^63 bytes in: past int64.
  f.args.q = with_strides(f.args.q, {int64_t(1) << 62, 8 * 64, 64, 1});
  EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kValue,
                           "hopattn.attention_fwd: q: expected strides whose byte offsets fit in "
                           "int64, got strides [4611686018427387904, 512, 64, 1] for shape "
                           "[2, 5, 8, 64]"));
  Fwd g = dense_fwd();
  g.args.k = with_strides(g.args.k, {-(int64_t(3) << 61), 2 * 64, 64, 1});  // -3 * 2^62 bytes
  EXPECT_TRUE(throws_error([&] { validate_fwd(g); }, ErrorKind::kValue,
                           "k: expected strides whose byte offsets fit in int64"));
  Fwd h = dense_fwd();
  h.args.v = with_shape(h.args.v, {int64_t(1) << 40, int64_t(1) << 40, 2, 64});
  EXPECT_TRUE(throws_error([&] { validate_fwd(h); }, ErrorKind::kValue,
                           "v: expected an element count that fits in int64, got shape "
                           "[1099511627776, 1099511627776, 2, 64]"));
}

// Token counts are int32 (cu_seqlens, kv_lens, the kernels' indices): a longer sequence is an
// error here rather than an allocation failure or a wrapped index later.
TEST(ValidateFwdSafety, TokenCountsBeyondInt32AreRejected) {
  constexpr int64_t kTooMany = (int64_t(1) << 31) + 1;
  Fwd f = dense_fwd();
  f.args.k = with_strides(with_shape(f.args.k, {2, kTooMany, 2, 64}), {0, 0, 64, 1});
  f.args.v = f.args.k;
  f.opts.window = {0, 0};
  EXPECT_TRUE(throws_error([&] { validate_fwd(f); }, ErrorKind::kValue,
                           "hopattn.attention_fwd: k: expected at most 2147483647 keys (token "
                           "counts are int32), got 2147483649"));
  Fwd g = dense_fwd();
  g.args.q = with_strides(with_shape(g.args.q, {2, kTooMany, 8, 64}), {0, 0, 64, 1});
  EXPECT_TRUE(throws_error([&] { validate_fwd(g); }, ErrorKind::kValue,
                           "q: expected at most 2147483647 queries (token counts are int32), got "
                           "2147483649"));
  Fwd v = varlen_fwd();
  v.args.k = with_strides(with_shape(v.args.k, {kTooMany, 2, 64}), {0, 64, 1});
  v.args.v = v.args.k;
  EXPECT_TRUE(throws_error([&] { validate_fwd(v); }, ErrorKind::kValue,
                           "k: expected at most 2147483647 keys"));
}

}  // namespace
}  // namespace hopattn::testing
