// Shrinking a failing case: try smaller variants (fewer requests, shorter lengths, fewer heads,
// smaller head dims, options switched off) and keep any that still fails the same way, until
// none does. What is left is the case to debug and to keep as a regression test.
#pragma once

#include <functional>
#include <vector>

#include "case.hpp"
#include "check.hpp"

namespace hopattn::fuzz {

// Legal variants of `c`, each one step smaller, most promising (biggest cut) first.
std::vector<Case> shrink_candidates(const Case& c);

struct Shrunk {
  Case c;         // the smallest failing case found
  Report report;  // its failure
  int steps = 0;  // accepted shrinks
  int tried = 0;  // cases run
};

// Greedy: take the first candidate that fails with the same Report::Kind, repeat from it. Stops
// when no candidate fails, or after `max_tries` runs or `seconds` of trying.
Shrunk shrink(const Case& failing, const Report& failure,
              const std::function<Report(const Case&)>& check, int max_tries = 400,
              double seconds = 60.0);

}  // namespace hopattn::fuzz
