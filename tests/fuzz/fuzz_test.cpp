// The CPU fuzzer: seeded random cases over every family and option, each run through the public
// API (validators, then the CPU reference) and through the naive formulas of tests/cpu, which
// must agree to the rounding of the stored result (check.hpp, Tolerance). One test per family,
// and one per family for invalid cases (one rule broken: rejected, nothing written).
//
// Default (CI): HOPATTN_FUZZ_SECONDS=45 split among the families (driver.cpp, time_share), case
// i of a family has seed 1 + i, so every run repeats the same cases; a slower machine runs fewer
// of them (at least 8 a family).
//
//   hopattn_fuzz_tests                                  the CI run
//   HOPATTN_FUZZ_SECONDS=600 hopattn_fuzz_tests         longer (or --seconds=600)
//   HOPATTN_FUZZ_SEED=$RANDOM hopattn_fuzz_tests        other cases (or --seed=N: only seed N,
//                                                       with --gtest_filter=Fuzz.Decode, say)
//   HOPATTN_FUZZ_CASES=2000 hopattn_fuzz_tests          a fixed count per family (--cases=2000)
//   hopattn_fuzz_tests --replay='decode seed=7 ...'     one case line as printed on failure;
//                                                       --no-shrink skips shrinking it
//   hopattn_fuzz_tests --list=20                        the first 20 case lines of each family
//
// A failure prints the case line, the smallest failing variant the shrinker found and the replay
// command. Keep every fixed failure as a line in regression_test.cpp.
#include <gtest/gtest.h>

#include <iostream>
#include <stdexcept>

#include "driver.hpp"

namespace hopattn::fuzz {
namespace {

Settings& settings() {
  static Settings s;
  return s;
}

void fuzz(Family f, bool invalid = false) {
  const FamilyResult r = run_family(f, invalid, settings(), public_api(), naive_formulas(),
                                    Tolerance::reference_vs_naive());
  std::cout << "fuzz " << family_name(f) << (invalid ? " invalid" : "") << ": " << r.cases
            << " cases (seeds " << settings().base_seed << ".."
            << settings().base_seed + r.cases - 1 << ") in " << r.seconds << " s, " << r.failures
            << " failed\n";
  EXPECT_EQ(r.failures, 0) << r.failure_log;
}

TEST(Fuzz, Fwd) { fuzz(Family::kFwd); }
TEST(Fuzz, Bwd) { fuzz(Family::kBwd); }
TEST(Fuzz, Decode) { fuzz(Family::kDecode); }
TEST(Fuzz, Mla) { fuzz(Family::kMla); }
TEST(Fuzz, Merge) { fuzz(Family::kMerge); }
TEST(Fuzz, Batch) { fuzz(Family::kBatch); }

// Valid cases with one rule broken: rejected, nothing written (invalid.hpp).
TEST(FuzzInvalid, Fwd) { fuzz(Family::kFwd, true); }
TEST(FuzzInvalid, Bwd) { fuzz(Family::kBwd, true); }
TEST(FuzzInvalid, Decode) { fuzz(Family::kDecode, true); }
TEST(FuzzInvalid, Mla) { fuzz(Family::kMla, true); }
TEST(FuzzInvalid, Merge) { fuzz(Family::kMerge, true); }
TEST(FuzzInvalid, Batch) { fuzz(Family::kBatch, true); }

}  // namespace
}  // namespace hopattn::fuzz

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace hopattn::fuzz;  // NOLINT: main of this binary
  try {
    settings() = read_settings(&argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << e.what() << '\n';
    return 2;
  }
  if (settings().list > 0) {
    list_cases(settings());
    return 0;
  }
  if (!settings().replay.empty()) {
    return replay(settings(), public_api(), naive_formulas(), Tolerance::reference_vs_naive());
  }
  return RUN_ALL_TESTS();
}
