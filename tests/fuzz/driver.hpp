// The fuzz run: settings (environment, then command line), the loop over a family's seeds under
// a time budget, and the failure report (the case line, its shrunk form, how to replay it).
#pragma once

#include <cstdint>
#include <string>

#include "case.hpp"
#include "check.hpp"

namespace hopattn::fuzz {

struct Settings {
  double seconds = 45.0;   // the whole run, shared among the families (HOPATTN_FUZZ_SECONDS)
  int cases = 0;           // > 0: exactly this many cases per family, whatever the time
  int max_cases = 0;       // > 0: at most this many per family (the time budget may stop sooner)
  uint64_t base_seed = 1;  // case i of a family has seed base_seed + i (HOPATTN_FUZZ_SEED)
  int min_cases = 8;       // run at least this many per family, however slow the machine
  int max_failures = 3;    // per family: stop after this many (each one is shrunk)
  bool shrink = true;
  double shrink_seconds = 60.0;                // per failure
  std::string program = "hopattn_fuzz_tests";  // named in the replay command of a failure
  std::string replay;                          // a case line to run alone (--replay)
  int list = 0;  // > 0: print the first `list` case lines of every family (--list=N)
};

// Reads HOPATTN_FUZZ_SECONDS, HOPATTN_FUZZ_CASES, HOPATTN_FUZZ_SEED, then the flags --seconds=,
// --cases=, --max-cases=, --seed= (one case: base seed and cases 1), --replay=, --no-shrink,
// --list= from argv, removing the flags it used, over the defaults in `s`. Throws
// std::invalid_argument on a malformed value.
Settings read_settings(int* argc, char** argv, Settings s = {});

// Share of Settings::seconds given to the valid (or invalid) cases of `f`: the heavier families
// get more; invalid cases, which stop at the validators, a tenth in all.
double time_share(Family f, bool invalid);

struct FamilyResult {
  int cases = 0, failures = 0;
  int skipped = 0;  // of `cases`: declined by an implementation (Report::kSkipped)
  double seconds = 0;
  std::string failure_log;  // the reports of the failures, ready to print
};

// Runs generate(f, base_seed + i) (generate_invalid when `invalid`) for i = 0, 1, ... through
// check_case() until the family's time share (or the case count) is used up; shrinks each
// failure. A skipped case counts as run, neither passed nor failed.
FamilyResult run_family(Family f, bool invalid, const Settings& s, const Implementation& a,
                        const Implementation& b, const Tolerance& tol);

// The report of one failing case: its line, its failure, the shrunk case and the replay command.
std::string failure_report(const Case& c, const Report& r, const Settings& s,
                           const Implementation& a, const Implementation& b, const Tolerance& tol);

// Prints the case lines of the first `s.list` seeds of every family, with their work.
void list_cases(const Settings& s);

// Runs one case line (Settings::replay) and prints the outcome; the process exit status.
int replay(const Settings& s, const Implementation& a, const Implementation& b,
           const Tolerance& tol);

}  // namespace hopattn::fuzz
