// The shared checks behind every validator: message format, dtype lists, shapes, workspace sizes.
#include "api/validate_common.hpp"

#include <gtest/gtest.h>

#include <string>

#include "validate_testing.hpp"

namespace hopattn::testing {
namespace {

using validate::Checker;
using validate::DTypes;
using validate::Shape;

TEST(ValidateCommon, MessagesNameTheEntryPointArgumentExpectedAndGiven) {
  const HostTensor q(DType::kBF16, {2, 3});
  const Checker c("decode", q, "q");
  try {
    c.rank(q, "q", 4, "[B, q_len, Hq, D]");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_STREQ(e.what(),
                 "hopattn.decode: q: expected rank 4 [B, q_len, Hq, D], got shape [2, 3]");
  }
}

TEST(ValidateCommon, AnchorMustBeDefined) {
  EXPECT_TRUE(throws_error([] { Checker("merge_states", TensorView(), "o_a"); }, ErrorKind::kValue,
                           "hopattn.merge_states: o_a: expected a tensor, got none"));
}

TEST(ValidateCommon, DTypeListsReadAsEnglish) {
  EXPECT_EQ(DTypes({DType::kFP32}).str(), "fp32");
  EXPECT_EQ(DTypes({DType::kBF16, DType::kFP16}).str(), "bf16 or fp16");
  EXPECT_EQ(DTypes({DType::kInt8, DType::kBF16, DType::kFP8E5M2}, "note").str(),
            "bf16, fp8_e5m2 or int8 (note)");
  EXPECT_TRUE(DTypes({DType::kBool}).contains(DType::kBool));
  EXPECT_FALSE(DTypes({DType::kBool}).contains(DType::kInt8));
}

TEST(ValidateCommon, ShapesCompareAndPrint) {
  const HostTensor t(DType::kFP32, {2, 5, 8});
  EXPECT_TRUE(Shape::of(t).matches(t));
  EXPECT_EQ(Shape::of(t).with(-1, 4).str(), "[2, 5, 4]");
  EXPECT_EQ(Shape::of(t).without_last().str(), "[2, 5]");
  EXPECT_FALSE(Shape({2, 5}).matches(t));
  EXPECT_FALSE(Shape({2, 5, 9}).matches(t));
  EXPECT_EQ(validate::head_dims_string(128, 128), "128");
  EXPECT_EQ(validate::head_dims_string(192, 128), "(Dqk 192, Dv 128)");
}

// Every size function reports 0 bytes today; the rule must hold once kernels need scratch.
TEST(ValidateCommon, WorkspaceMustHoldTheReportedSize) {
  const HostTensor q(DType::kBF16, {1});
  const Checker c("attention_bwd", q, "q");
  EXPECT_TRUE(passes([&] { c.workspace({}, 0); }));
  char buffer[64];
  EXPECT_TRUE(passes([&] { c.workspace({buffer, 64}, 64); }));
  EXPECT_TRUE(throws_error(
      [&] {
        c.workspace({buffer, 32}, 64);
      },
      ErrorKind::kValue, "hopattn.attention_bwd: workspace: expected >= 64 bytes, got 32 bytes"));
  EXPECT_TRUE(throws_error(
      [&] {
        c.workspace({nullptr, 64}, 64);
      },
      ErrorKind::kValue, "workspace: expected a buffer of 64 bytes, got a null pointer"));
}

TEST(ValidateCommon, IndexValuesAreReadOnHostOnly) {
  const HostTensor q(DType::kBF16, {1});
  EXPECT_TRUE(Checker("decode", q, "q").reads_index_values());
  EXPECT_FALSE(Checker("decode", on_cuda(q), "q").reads_index_values());
}

TEST(ValidateCommon, TensorsThatOverlapThemselves) {
  const HostTensor t(DType::kFP32, {2, 3, 4});
  EXPECT_FALSE(validate::overlaps_itself(t));
  EXPECT_TRUE(validate::overlaps_itself(with_strides(t, {0, 4, 1}))) << "expand";
  EXPECT_TRUE(validate::overlaps_itself(with_strides(t, {12, 2, 1}))) << "rows 2 apart";
  EXPECT_TRUE(validate::overlaps_itself(with_strides(t, {12, 4, 0})));
  EXPECT_FALSE(validate::overlaps_itself(with_strides(t, {1, 2, 6}))) << "a permuted layout";
  EXPECT_FALSE(validate::overlaps_itself(with_strides(t, {-12, 4, 1}))) << "a flipped dim";
  const HostTensor row(DType::kFP32, {1, 3});
  EXPECT_FALSE(validate::overlaps_itself(with_strides(row, {0, 1}))) << "size-1 dims never move";
  const HostTensor none(DType::kFP32, {0, 3});
  EXPECT_FALSE(validate::overlaps_itself(with_strides(none, {0, 0}))) << "no elements";
  EXPECT_TRUE(validate::overlaps_itself(with_strides(t, {int64_t(1) << 62, int64_t(1) << 62, 1})))
      << "offsets that overflow count as overlapping";
}

TEST(ValidateCommon, TensorsThatShareMemory) {
  const HostTensor buf(DType::kFP32, {2, 5, 2, 3, 4});  // [B, S, 2, H, D]: two packed tensors
  const TensorView first = with_strides(with_shape(buf, {2, 5, 3, 4}), {120, 24, 4, 1});
  const TensorView second = shifted(first, 12 * 4);
  EXPECT_FALSE(validate::may_share_memory(first, second)) << "interleaved, disjoint";
  EXPECT_FALSE(validate::may_share_memory(second, first));
  EXPECT_TRUE(validate::may_share_memory(first, first));
  EXPECT_TRUE(validate::may_share_memory(first, shifted(first, 4))) << "one element over";
  EXPECT_TRUE(validate::may_share_memory(first, shifted(first, 2))) << "half an element over";
  EXPECT_TRUE(validate::may_share_memory(first, with_shape(buf, {2, 5, 3}))) << "lse over out";
  const HostTensor other(DType::kFP32, {2, 5, 3, 4});
  EXPECT_FALSE(validate::may_share_memory(first, other));
  EXPECT_FALSE(validate::may_share_memory(first, with_shape(first, {0})));
}

TEST(ValidateCommon, OutputsOverlapNeitherThemselvesEachOtherNorInputs) {
  const HostTensor q_buf(DType::kFP32, {4, 8}), out_buf(DType::kFP32, {4, 8});
  const HostTensor lse_buf(DType::kFP32, {4});
  const TensorView q = q_buf, out = out_buf, lse = lse_buf;
  const Checker c("merge_states", q, "q");
  const TensorView none;
  EXPECT_TRUE(passes([&] {
    c.outputs_disjoint({{&out, "out"}, {&lse, "lse"}, {&none, "dsinks"}},
                       {{&q, "q"}, {&q, "k"}, {&none, "sinks"}});
  }));
  const TensorView expanded = with_strides(out, {0, 1});
  EXPECT_TRUE(throws_error(
      [&] {
        c.outputs_disjoint({{&expanded, "out"}}, {});
      },
      ErrorKind::kValue,
      "hopattn.merge_states: out: expected an output whose elements do not "
      "overlap (no zero or overlapping strides), got strides [0, 1] for shape "
      "[4, 8]"));
  const TensorView lse_in_out = with_shape(out, {4});
  EXPECT_TRUE(throws_error(
      [&] {
        c.outputs_disjoint({{&out, "out"}, {&lse_in_out, "lse"}}, {});
      },
      ErrorKind::kValue,
      "lse: expected memory disjoint from out (outputs may not overlap), got a view sharing "
      "memory with out"));
  EXPECT_TRUE(throws_error(
      [&] {
        c.outputs_disjoint({{&q, "out"}}, {{&q, "o_a"}});
      },
      ErrorKind::kValue,
      "out: expected memory disjoint from the input o_a (no output may alias "
      "an input), got a view sharing memory with o_a"));
}

// from_dlpack names what it cannot take the way frameworks spell dtypes ("int64"), not as a
// DLDataType dump.
TEST(ValidateCommon, FromDlpackNamesUnsupportedTypesPlainly) {
  float cell[4] = {};
  int64_t shape[1] = {1};
  auto message = [&](DLDataType type) {
    DLTensor t{};
    t.data = cell;
    t.device = {kDLCPU, 0};
    t.ndim = 1;
    t.dtype = type;
    t.shape = shape;
    try {
      TensorView::from_dlpack(t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({kDLInt, 64, 1}),
            "from_dlpack: expected bf16, fp16, fp32, float8_e4m3fn, float8_e5m2, int8, int32 or "
            "bool, got int64");
  EXPECT_NE(message({kDLFloat, 64, 1}).find("got float64"), std::string::npos);
  EXPECT_NE(message({kDLUInt, 16, 1}).find("got uint16"), std::string::npos);
  EXPECT_NE(message({kDLFloat, 32, 4}).find("expected one lane per element, got float32x4"),
            std::string::npos);
}

}  // namespace
}  // namespace hopattn::testing
