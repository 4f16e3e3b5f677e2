// The safety contract (README, "Safety contract") for attention_fwd on the device: a bad
// device-resident index (a page id outside the pool, by TMA and by the gather; a kv_len past its
// pages; CSR offsets past page_indices; cu_seqlens past q's or k's rows) is never read through,
// the launch completes, and hopattn::check_errors() then throws naming the family, the request
// and the value (the batch family runs the same kernel code). Unused slots of the paged pools
// hold NaN. Run: hopattn_gpu_tests --gtest_filter='SafetyFwd*' (ideally under compute-sanitizer
// --tool memcheck, which must report nothing).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "cpu/validate_testing.hpp"
#include "fwd_kernel_check.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"

namespace hopattn::testing {
namespace {

using fwd_check::BadIndex;
using fwd_check::FwdCase;

class SafetyFwd : public DeviceStatusTest {};

FwdCase paged(int page_size, bool csr) {
  FwdCase c = fwd_check::varlen_case(DType::kBF16, {5, 17}, {40, 70}, 2, 4, true);
  c.page_size = page_size;
  c.csr = csr;
  return c;
}

// Runs the case with `bad`, then expects check_errors to report `fragment` and the value, and to
// have cleared the record.
void expect_reported(const FwdCase& c, BadIndex bad, const std::string& fragment) {
  int64_t value = 0;
  EXPECT_TRUE(passes([&] { value = fwd_check::run_with_bad_index(c, bad); }));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the kernel faulted";
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           "hopattn.check_errors: attention_fwd: request "));
  // The record was cleared by the throw; the next check passes. Run again to read the message.
  EXPECT_TRUE(passes([] { check_errors(); }));
  EXPECT_TRUE(passes([&] { fwd_check::run_with_bad_index(c, bad); }));
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           fragment + " = " + std::to_string(value)));
}

TEST_F(SafetyFwd, GoodCallLeavesNoRecord) {
  fwd_check::run_once(paged(16, false));
  EXPECT_TRUE(passes([] { check_errors(); }));
}

TEST_F(SafetyFwd, BadPageIdByTmaIsNotReadAndIsReported) {
  ASSERT_EQ(fwd_check::kv_load_path(paged(16, false)), "paged TMA, boxes of 16 slots");
  expect_reported(paged(16, false), BadIndex::kPageId, "page table");
}

TEST_F(SafetyFwd, NegativePageIdByTmaIsReported) {
  expect_reported(paged(64, true), BadIndex::kNegativePageId, "page table");
}

TEST_F(SafetyFwd, BadPageIdByGatherIsNotReadAndIsReported) {
  ASSERT_EQ(fwd_check::kv_load_path(paged(13, false)), "paged gather");
  expect_reported(paged(13, false), BadIndex::kPageId, "page table");
  expect_reported(paged(13, true), BadIndex::kNegativePageId, "page table");
}

TEST_F(SafetyFwd, KvLenPastItsPagesIsReported) {
  expect_reported(paged(16, false), BadIndex::kKvLen, "kv_lens");
  expect_reported(paged(13, false), BadIndex::kKvLen, "kv_lens");
}

TEST_F(SafetyFwd, CsrOffsetPastPageIndicesIsReported) {
  expect_reported(paged(16, true), BadIndex::kCsrIndptr, "page_indptr entry 2");
}

TEST_F(SafetyFwd, CuSeqlensPastTheRowsAreReported) {
  expect_reported(paged(16, false), BadIndex::kCuSeqlensQ, "cu_seqlens_q entry 2");
  FwdCase v = fwd_check::varlen_case(DType::kBF16, {5, 17}, {40, 70}, 2, 4, true);
  expect_reported(v, BadIndex::kCuSeqlensQ, "cu_seqlens_q entry 2");
  expect_reported(v, BadIndex::kCuSeqlensK, "cu_seqlens_k entry 2");
}

}  // namespace
}  // namespace hopattn::testing
