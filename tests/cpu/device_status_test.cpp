// The safety contract's host side (README, "Safety contract"): the device status word's encoding
// and messages (src/common/device_status.hpp), the recorder's keep-the-first rule, the decode
// schedule's checks of device-resident indices (compiled here as plain C++: a bad CSR offset or
// kv_len is recorded and never read past), debug mode's second validation over host copies of a
// CUDA call's index arrays (validate::DeviceValues::kHostCopies), and the public switches, which
// are no-ops for CPU calls.
#include "common/device_status.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "api/validate.hpp"
#include "cpu/validate_testing.hpp"
#include "hopattn/api.hpp"
#include "kernels/common/device_status.cuh"
#include "kernels/decode/schedule.cuh"

namespace hopattn::testing {
namespace {

DeviceStatus status_of(StatusFamily family, StatusIndex index, int request, int position,
                       int64_t value, int64_t bound) {
  DeviceStatus s{};
  s.tag = status_tag(family, index);
  s.request = request;
  s.position = position;
  s.value = value;
  s.bound = bound;
  return s;
}

TEST(DeviceStatus, TagRoundTrips) {
  for (StatusFamily f : {StatusFamily::kFwd, StatusFamily::kBwd, StatusFamily::kDecode,
                         StatusFamily::kMla, StatusFamily::kBatch, StatusFamily::kMerge}) {
    for (StatusIndex i :
         {StatusIndex::kPage, StatusIndex::kKvLen, StatusIndex::kPageIndptr,
          StatusIndex::kCuSeqlensQ, StatusIndex::kCuSeqlensK, StatusIndex::kSharedKvLen}) {
      const uint32_t tag = status_tag(f, i);
      EXPECT_NE(tag, 0u);
      EXPECT_EQ(status_family(tag), f);
      EXPECT_EQ(status_index(tag), i);
    }
  }
}

TEST(DeviceStatus, MessagesNameFamilyRequestValueAndBound) {
  EXPECT_EQ(describe_status(DeviceStatus{}), "");
  EXPECT_EQ(describe_status(status_of(StatusFamily::kDecode, StatusIndex::kPage, 1, 2, 9, 4)),
            "hopattn.check_errors: decode: request 1: page table entry 2 = 9: expected a page "
            "index in [0, 4) (the pages of the pool); its keys were read as zeros (outputs of this "
            "launch are not valid)");
  const std::string no_position =
      describe_status(status_of(StatusFamily::kDecode, StatusIndex::kPage, 3, -1, -7, 4));
  EXPECT_NE(no_position.find("request 3: page table = -7: expected a page index in [0, 4)"),
            std::string::npos)
      << no_position;
  struct Case {
    StatusFamily family;
    StatusIndex index;
    std::string fragment;
  };
  const Case cases[] = {
      {StatusFamily::kMla, StatusIndex::kKvLen, "mla: request 5: kv_lens = 1000: expected 0..64"},
      {StatusFamily::kMla, StatusIndex::kPageIndptr,
       "mla: request 5: page_indptr entry 6 = 1000: expected non-decreasing offsets in 0..64"},
      {StatusFamily::kFwd, StatusIndex::kCuSeqlensQ,
       "attention_fwd: request 5: cu_seqlens_q entry 6 = 1000: expected non-decreasing offsets "
       "in 0..64 (the rows of q)"},
      {StatusFamily::kBwd, StatusIndex::kCuSeqlensK,
       "attention_bwd: request 5: cu_seqlens_k entry 6 = 1000: expected non-decreasing offsets "
       "in 0..64 (the rows of k)"},
      {StatusFamily::kBatch, StatusIndex::kSharedKvLen,
       "BatchAttention.run: request 5: shared_kv_lens = 1000: expected 0..64"},
  };
  for (const Case& c : cases) {
    const int position =
        c.index == StatusIndex::kKvLen || c.index == StatusIndex::kSharedKvLen ? -1 : 6;
    const std::string m = describe_status(status_of(c.family, c.index, 5, position, 1000, 64));
    EXPECT_NE(m.find(c.fragment), std::string::npos) << m;
    EXPECT_EQ(m.rfind("hopattn.check_errors: ", 0), 0u) << m;
  }
}

TEST(DeviceStatus, RecorderKeepsTheFirstViolation) {
  DeviceStatus s{};
  kernels::record_violation(nullptr, status_tag(StatusFamily::kDecode, StatusIndex::kPage), 0, 0, 1,
                            1);  // no status word: nothing to do
  kernels::record_violation(&s, status_tag(StatusFamily::kDecode, StatusIndex::kPage), 2, 3, 99, 8);
  kernels::record_violation(&s, status_tag(StatusFamily::kMla, StatusIndex::kKvLen), 4, -1, 5, 1);
  EXPECT_EQ(status_family(s.tag), StatusFamily::kDecode);
  EXPECT_EQ(status_index(s.tag), StatusIndex::kPage);
  EXPECT_EQ(s.request, 2);
  EXPECT_EQ(s.position, 3);
  EXPECT_EQ(s.value, 99);
  EXPECT_EQ(s.bound, 8);
}

TEST(DeviceStatus, ClosedRangeIsOneUnsignedCompare) {
  EXPECT_TRUE(kernels::in_closed_range(0, 0));
  EXPECT_TRUE(kernels::in_closed_range(7, 7));
  EXPECT_FALSE(kernels::in_closed_range(8, 7));
  EXPECT_FALSE(kernels::in_closed_range(-1, 7));
  EXPECT_FALSE(kernels::in_closed_range(INT64_MIN, 7));
}

// ------------------------------------------------------------------ decode schedule checks

// One request (no beams), q_len 1, pages of 4 tokens, through CSR offsets `indptr`.
struct CsrDecode {
  std::vector<int32_t> indptr, indices, kv_lens;
  DeviceStatus status{};
  kernels::decode::Params p{};

  CsrDecode(std::vector<int32_t> ptr, std::vector<int32_t> lens)
      : indptr(std::move(ptr)), indices(8, 0), kv_lens(std::move(lens)) {
    p.page_size = 4;
    p.num_pages = 8;
    p.indptr = indptr.data();
    p.indptr_stride = 1;
    p.indices = indices.data();
    p.indices_stride = 1;
    p.num_indices = static_cast<int64_t>(indices.size());
    p.kv_lens = kv_lens.data();
    p.kv_lens_stride = 1;
    p.beam_width = 1;
    p.q_len = 1;
    p.group = 1;
    p.num_kv_heads = 1;
    p.rows_per_request = 1;
    p.rows_per_cta = 16;
    p.row_tiles = 1;
    p.num_splits = 1;
    kernels::decode::set_divisors(p);
    p.status = &status;
  }
  // Tiles of request r's CTA.
  int tiles(int r) {
    kernels::decode::CtaShared cs{};
    kernels::decode::setup_cta(p, cs, r, 0, 1, 0);
    return cs.tile_count;
  }
};

TEST(DecodeScheduleSafety, GoodIndicesRecordNothing) {
  CsrDecode d({0, 2, 8}, {8, 24});
  EXPECT_EQ(d.tiles(0), 1);
  EXPECT_EQ(d.tiles(1), 1);
  EXPECT_EQ(d.status.tag, 0u);
}

TEST(DecodeScheduleSafety, OffsetPastPageIndicesReadsNothing) {
  CsrDecode d({0, 2, 1000}, {8, 24});
  EXPECT_EQ(d.tiles(1), 0);  // the request reads no keys at all
  EXPECT_EQ(status_index(d.status.tag), StatusIndex::kPageIndptr);
  EXPECT_EQ(status_family(d.status.tag), StatusFamily::kDecode);
  EXPECT_EQ(d.status.request, 1);
  EXPECT_EQ(d.status.position, 2);  // page_indptr[2]
  EXPECT_EQ(d.status.value, 1000);
  EXPECT_EQ(d.status.bound, 8);
}

TEST(DecodeScheduleSafety, DecreasingOrNegativeOffsetsReadNothing) {
  CsrDecode d({0, 5, 3}, {8, 4});
  EXPECT_EQ(d.tiles(1), 0);
  EXPECT_EQ(status_index(d.status.tag), StatusIndex::kPageIndptr);
  EXPECT_EQ(d.status.position, 1);
  EXPECT_EQ(d.status.value, 5);

  CsrDecode n({-4, 2, 3}, {8, 4});
  EXPECT_EQ(n.tiles(0), 0);
  EXPECT_EQ(n.status.position, 0);
  EXPECT_EQ(n.status.value, -4);
}

TEST(DecodeScheduleSafety, KvLenPastItsPagesIsClampedAndRecorded) {
  CsrDecode d({0, 2, 8}, {8, 1 << 30});
  kernels::decode::CtaShared cs{};
  kernels::decode::setup_cta(d.p, cs, 1, 0, 1, 0);
  EXPECT_EQ(cs.kv_len[0], 24);  // 6 pages of 4 tokens
  EXPECT_EQ(status_index(d.status.tag), StatusIndex::kKvLen);
  EXPECT_EQ(d.status.request, 1);
  EXPECT_EQ(d.status.value, 1 << 30);
  EXPECT_EQ(d.status.bound, 24);

  CsrDecode n({0, 2, 8}, {-5, 4});
  EXPECT_EQ(n.tiles(0), 0);
  EXPECT_EQ(n.status.value, -5);
}

TEST(DecodeScheduleSafety, SharedPrefixPastTheShortestBeamIsRecorded) {
  CsrDecode d({0, 2, 4}, {8, 6});
  std::vector<int32_t> shared = {7};
  d.p.beam_width = 2;
  d.p.shared_kv_lens = shared.data();
  d.p.shared_stride = 1;
  d.p.rows_per_request = 2;
  kernels::decode::CtaShared cs{};
  kernels::decode::setup_cta(d.p, cs, 0, 0, 2, 0);
  EXPECT_EQ(status_index(d.status.tag), StatusIndex::kSharedKvLen);
  EXPECT_EQ(d.status.value, 7);
  EXPECT_EQ(d.status.bound, 6);
}

// ------------------------------------------------------------------ debug mode's validation

// A decode call whose tensors are host buffers tagged as CUDA ones: the validator of a launch
// never reads their values; debug mode's pass (kHostCopies) reads them like a CPU call's.
struct FakeCudaDecode {
  TensorKeeper keep;
  DecodeArgs args;
  DecodeOptions opts;
  FakeCudaDecode() {
    args.q = keep.make(DType::kBF16, {2, 1, 4, 64});
    args.k_cache = keep.make(DType::kBF16, {4, 4, 2, 64});
    args.v_cache = keep.make(DType::kBF16, {4, 4, 2, 64});
    args.pages.block_table = keep.ints({0, 1, 2, 3}, {2, 2});
    args.pages.kv_lens = keep.ints({5, 8});
    args.out = keep.make(DType::kBF16, {2, 1, 4, 64});
    args.lse = keep.make(DType::kFP32, {2, 1, 4});
  }
  void to_cuda() {
    for (TensorView* t : {&args.q, &args.k_cache, &args.v_cache, &args.pages.block_table,
                          &args.pages.kv_lens, &args.out, &args.lse, &args.sinks}) {
      *t = on_cuda(*t);
    }
  }
};

TEST(DebugValidation, HostCopiesOfDeviceIndicesAreChecked) {
  FakeCudaDecode f;
  f.args.pages.block_table = f.keep.ints({0, 1, 2, 9}, {2, 2});  // the page 9 of 4
  f.to_cuda();
  EXPECT_TRUE(passes([&] { validate::decode(f.args, f.opts); }));
  EXPECT_TRUE(
      throws_error([&] { validate::decode(f.args, f.opts, validate::DeviceValues::kHostCopies); },
                   ErrorKind::kValue,
                   "hopattn.decode: page_table[1][1]: expected a page index in [0, 4), got 9"));
}

TEST(DebugValidation, HostCopiesOfSinksAreChecked) {
  FakeCudaDecode f;
  f.args.sinks = f.keep.floats({0, NAN, 0, 0});
  f.to_cuda();
  EXPECT_TRUE(passes([&] { validate::decode(f.args, f.opts); }));
  EXPECT_TRUE(
      throws_error([&] { validate::decode(f.args, f.opts, validate::DeviceValues::kHostCopies); },
                   ErrorKind::kValue, "sinks"));
}

TEST(DebugValidation, GoodCallPassesBothWays) {
  FakeCudaDecode f;
  f.to_cuda();
  EXPECT_TRUE(passes([&] { validate::decode(f.args, f.opts); }));
  EXPECT_TRUE(
      passes([&] { validate::decode(f.args, f.opts, validate::DeviceValues::kHostCopies); }));
}

TEST(DebugValidation, MlaCuSeqlensOfHostCopiesAreChecked) {
  TensorKeeper keep;
  MlaArgs a;
  MlaOptions o;
  a.q_nope = keep.make(DType::kBF16, {3, 2, kMlaLatentDim});
  a.q_pe = keep.make(DType::kBF16, {3, 2, kMlaRopeDim});
  a.ckv = keep.make(DType::kBF16, {4, 16, kMlaLatentDim});
  a.kpe = keep.make(DType::kBF16, {4, 16, kMlaRopeDim});
  a.cu_seqlens_q = keep.ints({0, 2, 7});  // past q's 3 rows
  a.max_seqlen_q = 5;
  a.pages.block_table = keep.ints({0, 1, 2, 3}, {2, 2});
  a.pages.kv_lens = keep.ints({20, 9});
  a.out = keep.make(DType::kBF16, {3, 2, kMlaLatentDim});
  a.lse = keep.make(DType::kFP32, {3, 2});
  for (TensorView* t : {&a.q_nope, &a.q_pe, &a.ckv, &a.kpe, &a.cu_seqlens_q, &a.pages.block_table,
                        &a.pages.kv_lens, &a.out, &a.lse}) {
    *t = on_cuda(*t);
  }
  EXPECT_TRUE(passes([&] { validate::mla(a, o); }));
  EXPECT_TRUE(throws_error([&] { validate::mla(a, o, validate::DeviceValues::kHostCopies); },
                           ErrorKind::kValue,
                           "cu_seqlens_q[2]: expected <= 3 (the rows of q_nope)"));
}

// ------------------------------------------------------------------ public switches

TEST(SafetySwitches, DebugModeToggles) {
  const bool before = debug_enabled();
  set_debug(true);
  EXPECT_TRUE(debug_enabled());
  set_debug(false);
  EXPECT_FALSE(debug_enabled());
  set_debug(before);
}

// CPU calls validate their index arrays before running, debug mode or not: the same error.
TEST(SafetySwitches, DebugModeLeavesCpuCallsAsTheyAre) {
  FakeCudaDecode f;
  f.args.pages.block_table = f.keep.ints({0, 1, 2, 9}, {2, 2});
  for (bool debug : {false, true}) {
    set_debug(debug);
    EXPECT_TRUE(throws_error([&] { hopattn::decode(f.args, f.opts); }, ErrorKind::kValue,
                             "page_table[1][1]: expected a page index in [0, 4), got 9"))
        << debug;
  }
  set_debug(false);
}

// Nothing launched in this process (the CPU tests launch no kernel): nothing to report, and no
// CUDA call is made, so this holds on machines without a GPU too.
TEST(SafetySwitches, CheckErrorsBeforeAnyLaunchIsQuiet) {
  EXPECT_TRUE(passes([] { check_errors(); }));
  EXPECT_TRUE(passes([] { check_errors(nullptr); }));
}

}  // namespace
}  // namespace hopattn::testing
