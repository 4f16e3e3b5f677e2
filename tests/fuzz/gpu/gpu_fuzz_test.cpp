// The GPU run of the fuzzer: the cases of the CPU run (the same generator and seeds, case i of a
// family has seed base + i) through the public API on CUDA tensors (cuda_api.hpp), each compared
// with the public API on the host tensors of the same case (the CPU reference) to the kernels'
// tolerance (check.hpp, Tolerance::kernel_vs_reference). A case the CUDA kernels do not cover
// (the API raises kNotImplemented: head dims off the list, paged backward; or a CUDA-only rule:
// fp32, TMA strides and alignment) is skipped and counted, not failed. Every test skips without a
// Hopper GPU.
//
// Default: 40 s in all shared among the families (driver.cpp, time_share), at most 100 cases a
// family (500 in all), whichever comes first; at least 8 a family.
//
//   hopattn_gpu_fuzz_tests                              the default run (~40 s)
//   hopattn_gpu_fuzz_tests --seconds=600 --max-cases=0  longer (HOPATTN_FUZZ_SECONDS=600 too)
//   hopattn_gpu_fuzz_tests --cases=2000                 exactly 2000 cases a family
//   hopattn_gpu_fuzz_tests --gtest_filter=GpuFuzz.Decode --seed=417     decode's case 417 only
//   hopattn_gpu_fuzz_tests --replay='decode seed=417 ...'               one printed case line
//
// A failure prints the case line, its shrunk form (10 s of shrinking at most) and the replay
// command; a CUDA fault prints the case line and exits (status 3).
#include <gtest/gtest.h>

#include <iostream>
#include <stdexcept>

#include "cuda_api.hpp"
#include "fuzz/driver.hpp"
#include "gpu/hopper_test_util.hpp"

namespace hopattn::fuzz {
namespace {

Settings& settings() {
  static Settings s;
  return s;
}

void gpu_fuzz(Family f) {
  const std::string why = testing::hopper::gpu_skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  const FamilyResult r =
      run_family(f, false, settings(), cuda_api(), public_api(), Tolerance::kernel_vs_reference());
  std::cout << "gpu fuzz " << family_name(f) << ": " << r.cases << " cases (seeds "
            << settings().base_seed << ".." << settings().base_seed + r.cases - 1 << ") in "
            << r.seconds << " s: " << r.cases - r.skipped - r.failures << " passed, " << r.skipped
            << " skipped (not on CUDA), " << r.failures << " failed\n";
  EXPECT_EQ(r.failures, 0) << r.failure_log;
}

TEST(GpuFuzz, Fwd) { gpu_fuzz(Family::kFwd); }
TEST(GpuFuzz, Bwd) { gpu_fuzz(Family::kBwd); }
TEST(GpuFuzz, Decode) { gpu_fuzz(Family::kDecode); }
TEST(GpuFuzz, Mla) { gpu_fuzz(Family::kMla); }
TEST(GpuFuzz, Merge) { gpu_fuzz(Family::kMerge); }

}  // namespace
}  // namespace hopattn::fuzz

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace hopattn::fuzz;  // NOLINT: main of this binary
  Settings defaults;
  defaults.seconds = 40.0 / 0.9;  // 40 s: the valid families' shares sum to 0.9 (time_share)
  defaults.max_cases = 100;
  defaults.shrink_seconds = 10.0;
  defaults.program = "hopattn_gpu_fuzz_tests";
  try {
    settings() = read_settings(&argc, argv, defaults);
  } catch (const std::invalid_argument& e) {
    std::cerr << e.what() << '\n';
    return 2;
  }
  if (settings().list > 0) {
    list_cases(settings());
    return 0;
  }
  if (!settings().replay.empty()) {
    const std::string why = hopattn::testing::hopper::gpu_skip_reason();
    if (!why.empty()) {
      std::cerr << "--replay needs a Hopper GPU: " << why << '\n';
      return 2;
    }
    return replay(settings(), cuda_api(), public_api(), Tolerance::kernel_vs_reference());
  }
  return RUN_ALL_TESTS();
}
