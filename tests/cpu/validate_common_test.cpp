// The shared checks behind every validator: message format, dtype lists, shapes, workspace sizes.
#include "api/validate_common.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hopattn::testing
