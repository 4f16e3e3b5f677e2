// The safety contract (README, "Safety contract") for attention_bwd on the device: a varlen
// cu_seqlens entry past q's or k's rows, or a backwards pair, is clamped where the three bwd
// kernels read it (nothing outside the tensors is read or written), the launch completes, and
// hopattn::check_errors() then throws naming attention_bwd, the request, the entry and its
// value. Run: hopattn_gpu_tests --gtest_filter='SafetyBwd*' (ideally under compute-sanitizer
// --tool memcheck, which must report nothing).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "bwd_kernel_test.hpp"
#include "cpu/validate_testing.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"

namespace hopattn::testing {
namespace {

class SafetyBwd : public DeviceStatusTest {};

// Runs the backward of a three-request varlen case with entry `entry` of cu_seqlens_q (or _k)
// set to `value` on the device, then expects check_errors to name it.
void expect_reported(bool keys, int entry, int value, const std::string& fragment) {
  bwd::BwdCase c = bwd::varlen_case(DType::kBF16, {5, 17, 9}, {40, 70, 3}, 2, 4, true);
  std::mt19937_64 rng(test_seed());
  bwd::Problem pb(c, rng);
  bwd::Mirrored& cu = keys ? *pb.cu_k_t : *pb.cu_q_t;
  static_cast<int*>(cu.host.data())[entry] = value;
  cu.upload();
  BwdArgs a = pb.bwd_args(true);
  const size_t bytes = attention_bwd_workspace_size(a, c.opts);
  hopper::DeviceBuffer<uint8_t> ws(std::max<size_t>(bytes, 16));
  a.workspace = {ws.get(), bytes};
  EXPECT_TRUE(passes([&] { attention_bwd(a, c.opts, nullptr); }));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "a bwd kernel faulted";
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           "hopattn.check_errors: attention_bwd: request "));
  EXPECT_TRUE(passes([] { check_errors(); }));  // the throw cleared the record
  EXPECT_TRUE(passes([&] { attention_bwd(a, c.opts, nullptr); }));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(throws_error([] { check_errors(); }, ErrorKind::kDeviceIndex,
                           fragment + " = " + std::to_string(value)));
}

TEST_F(SafetyBwd, CuSeqlensPastTheRowsAreReported) {
  expect_reported(false, 2, 1000, "cu_seqlens_q entry 2");
  expect_reported(true, 2, 5000, "cu_seqlens_k entry 2");
  expect_reported(false, 3, 1 << 30, "cu_seqlens_q entry 3");
}

TEST_F(SafetyBwd, NegativeAndBackwardsOffsetsAreReported) {
  expect_reported(true, 1, -7, "cu_seqlens_k entry 1");
  expect_reported(false, 1, 30, "cu_seqlens_q entry 1");  // past entry 2 (22): backwards
}

}  // namespace
}  // namespace hopattn::testing
