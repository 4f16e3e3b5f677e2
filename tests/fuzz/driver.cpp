#include "driver.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "generate.hpp"
#include "invalid.hpp"
#include "shrink.hpp"

namespace hopattn::fuzz {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double to_double(const std::string& what, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (*text == '\0' || *end != '\0' || !(v >= 0)) {
    throw std::invalid_argument(what + ": expected a number >= 0, got '" + text + "'");
  }
  return v;
}

uint64_t to_u64(const std::string& what, const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (*text == '\0' || *end != '\0') {
    throw std::invalid_argument(what + ": expected an unsigned integer, got '" + text + "'");
  }
  return v;
}

// "--name=value" -> value, else nullptr.
const char* flag_value(const char* arg, const char* name) {
  const size_t n = std::strlen(name);
  return std::strncmp(arg, name, n) == 0 && arg[n] == '=' ? arg + n + 1 : nullptr;
}

}  // namespace

Settings read_settings(int* argc, char** argv, Settings s) {
  if (const char* v = std::getenv("HOPATTN_FUZZ_SECONDS"))
    s.seconds = to_double("HOPATTN_FUZZ_SECONDS", v);
  if (const char* v = std::getenv("HOPATTN_FUZZ_CASES"))
    s.cases = int(to_u64("HOPATTN_FUZZ_CASES", v));
  if (const char* v = std::getenv("HOPATTN_FUZZ_SEED"))
    s.base_seed = to_u64("HOPATTN_FUZZ_SEED", v);
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const char* a = argv[i];
    if (const char* v = flag_value(a, "--seconds")) {
      s.seconds = to_double("--seconds", v);
    } else if (const char* v = flag_value(a, "--cases")) {
      s.cases = int(to_u64("--cases", v));
    } else if (const char* v = flag_value(a, "--max-cases")) {
      s.max_cases = int(to_u64("--max-cases", v));
    } else if (const char* v = flag_value(a, "--seed")) {
      s.base_seed = to_u64("--seed", v);
      s.cases = 1;
    } else if (const char* v = flag_value(a, "--replay")) {
      s.replay = v;
    } else if (const char* v = flag_value(a, "--list")) {
      s.list = int(to_u64("--list", v));
    } else if (std::strcmp(a, "--no-shrink") == 0) {
      s.shrink = false;
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  return s;
}

double time_share(Family f, bool invalid) {
  if (invalid) return 0.015;
  switch (f) {
    case Family::kFwd:
      return 0.18;
    case Family::kBwd:
      return 0.18;
    case Family::kDecode:
      return 0.19;
    case Family::kMla:
      return 0.14;
    case Family::kMerge:
      return 0.09;
    case Family::kBatch:
      return 0.13;
  }
  return 0.2;
}

std::string failure_report(const Case& c, const Report& r, const Settings& s,
                           const Implementation& a, const Implementation& b, const Tolerance& tol) {
  std::ostringstream os;
  os << family_name(c.family) << " case failed (" << kind_name(r.kind) << "): " << r.detail
     << "\n  case:   " << describe(c) << '\n';
  Case smallest = c;
  if (s.shrink) {
    const Shrunk sh = shrink(
        c, r, [&](const Case& k) { return check_case(k, a, b, tol); }, 400, s.shrink_seconds);
    smallest = sh.c;
    os << "  shrunk: " << describe(sh.c) << "\n          (" << sh.steps << " steps, " << sh.tried
       << " cases tried): " << sh.report.detail << '\n';
  }
  os << "  replay: " << s.program << " --replay='" << describe(smallest) << "'\n";
  return os.str();
}

FamilyResult run_family(Family f, bool invalid, const Settings& s, const Implementation& a,
                        const Implementation& b, const Tolerance& tol) {
  FamilyResult res;
  const double start = now_seconds();
  const double budget = s.seconds * time_share(f, invalid);
  for (uint64_t i = 0;; ++i) {
    if (s.cases > 0 ? res.cases >= s.cases
                    : res.cases >= s.min_cases && now_seconds() - start >= budget) {
      break;
    }
    if (s.cases <= 0 && s.max_cases > 0 && res.cases >= s.max_cases) break;
    if (res.failures >= s.max_failures) break;
    const Case c = invalid ? generate_invalid(f, s.base_seed + i) : generate(f, s.base_seed + i);
    const Report r = check_case(c, a, b, tol);
    ++res.cases;
    if (r.skipped()) ++res.skipped;
    if (r.ok() || r.skipped()) continue;
    ++res.failures;
    res.failure_log += failure_report(c, r, s, a, b, tol);
  }
  res.seconds = now_seconds() - start;
  return res;
}

void list_cases(const Settings& s) {
  for (Family f : kFamilies) {
    for (int i = 0; i < s.list; ++i) {
      const Case c = generate(f, s.base_seed + i);
      std::cout << describe(c) << "  (work " << case_work(c) << ")\n";
    }
  }
}

int replay(const Settings& s, const Implementation& a, const Implementation& b,
           const Tolerance& tol) {
  Case c;
  try {
    c = parse(s.replay);
    legalize(c);
  } catch (const std::invalid_argument& e) {
    std::cerr << "--replay: " << e.what() << '\n';
    return 2;
  }
  std::cout << "case: " << describe(c) << '\n';
  const Report r = check_case(c, a, b, tol);
  if (r.skipped()) {
    std::cout << "skipped: " << r.detail << '\n';
    return 0;
  }
  if (r.ok()) {
    std::cout << "pass: "
              << (c.corrupt.empty() ? a.name + " and " + b.name + " agree"
                                    : a.name + " rejects it, writing nothing")
              << '\n';
    return 0;
  }
  std::cout << failure_report(c, r, s, a, b, tol);
  return 1;
}

}  // namespace hopattn::fuzz
