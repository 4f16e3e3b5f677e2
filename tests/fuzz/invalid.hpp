// Invalid cases: a valid case with one rule broken after its tensors are built (Case::corrupt
// names which: a page index past the pool, a kv_len past its pages, a NaN sink, a zero scale,
// outputs sharing memory, ...). The public API must raise hopattn::Error for it and leave every
// output untouched (DESIGN.md: "nothing is written to outputs"); anything else is a failure.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "case.hpp"
#include "check.hpp"

namespace hopattn::fuzz {

// Every corruption's name, and those that apply to `c` (its family, layout and options).
std::vector<std::string> corruption_names();
std::vector<std::string> corruptions_for(const Case& c);

// generate(family, seed) with one of its applicable corruptions, chosen by the seed; a case with
// none comes back valid.
Case generate_invalid(Family family, uint64_t seed);

// Builds the case, applies its corruption and runs `api` on it: a pass when it throws
// hopattn::Error with every output still poisoned. A corruption that no longer applies (a
// shrunk case without pages, say) passes, so shrinking never keeps such a case.
Report run_rejection(const Case& c, const Implementation& api);

// run_pair() for a valid case, run_rejection() for a corrupted one.
Report check_case(const Case& c, const Implementation& a, const Implementation& b,
                  const Tolerance& tol);

// check_case() of one printed case line (parsed, legalized) as a test assertion: what failed and
// the case's full line when it does (the fixed regression lines of the CPU and GPU runs).
::testing::AssertionResult line_passes(const std::string& line, const Implementation& a,
                                       const Implementation& b, const Tolerance& tol);

}  // namespace hopattn::fuzz
