#include "step.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "cli_args.hpp"

namespace hopattn::cli {
namespace {

constexpr long long kMaxStepTokens = 1 << 24;
constexpr long long kMaxStepRequests = 1 << 16;

[[noreturn]] void bad_term(std::string_view term, const std::string& why) {
  throw UsageError("--step: term '" + std::string(term) + "': " + why +
                   " (expected [Nx]NEW[@CACHED] or [Nx]NEW@LO..HI, or a preset a | b | c | d)");
}

long long number(std::string_view term, std::string_view text, long long lo, long long hi,
                 const char* what) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    bad_term(term, std::string(what) + " must be an integer in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + ", got '" + s + "'");
  }
  return v;
}

// One TERM appended to `out`.
void parse_term(std::string_view term, std::vector<StepRequest>& out) {
  if (term.empty()) bad_term(term, "empty term");
  std::string_view rest = term;
  long long count = 1;
  if (const size_t x = rest.find('x'); x != std::string_view::npos) {
    count = number(term, rest.substr(0, x), 1, kMaxStepRequests, "the count N");
    rest = rest.substr(x + 1);
  }
  std::string_view new_text = rest, cached_text = "0";
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    new_text = rest.substr(0, at);
    cached_text = rest.substr(at + 1);
  }
  const int q_len = static_cast<int>(number(term, new_text, 1, kMaxStepTokens, "NEW"));
  long long lo = 0, hi = 0;
  if (const size_t dots = cached_text.find(".."); dots != std::string_view::npos) {
    lo = number(term, cached_text.substr(0, dots), 0, kMaxStepTokens, "LO");
    hi = number(term, cached_text.substr(dots + 2), lo, kMaxStepTokens, "HI (>= LO)");
  } else {
    lo = hi = number(term, cached_text, 0, kMaxStepTokens, "CACHED");
  }
  for (long long i = 0; i < count; ++i) {
    // Evenly spread, both ends included; rounded to the nearest token.
    const long long cached =
        count == 1 ? lo : lo + ((hi - lo) * i * 2 + (count - 1)) / (2 * (count - 1));
    out.push_back({q_len, static_cast<int>(cached)});
  }
  if (static_cast<long long>(out.size()) > kMaxStepRequests) {
    bad_term(term, "more than " + std::to_string(kMaxStepRequests) + " requests in the step");
  }
}

}  // namespace

int Step::prefills() const {
  return static_cast<int>(std::count_if(requests.begin(), requests.end(),
                                        [](const StepRequest& r) { return !r.decode(); }));
}

int64_t Step::total_q() const {
  int64_t n = 0;
  for (const StepRequest& r : requests) n += r.q_len;
  return n;
}

int64_t Step::total_kv() const {
  int64_t n = 0;
  for (const StepRequest& r : requests) n += r.kv_len();
  return n;
}

int Step::max_q_len() const {
  int m = 0;
  for (const StepRequest& r : requests) m = std::max(m, r.q_len);
  return m;
}

int Step::max_kv_len() const {
  int m = 0;
  for (const StepRequest& r : requests) m = std::max(m, r.kv_len());
  return m;
}

std::string Step::describe() const {
  std::ostringstream os;
  os << (name.size() <= 40 ? name : std::string("custom")) << ": ";
  if (prefills() > 0) os << prefills() << " prefill";
  if (prefills() > 0 && decodes() > 0) os << " + ";
  if (decodes() > 0) os << decodes() << " decode";
  const int64_t kv = total_kv();
  os << ", " << total_q() << " q, ";
  if (kv >= 10000) {
    os << (kv + 500) / 1000 << "k kv";
  } else {
    os << kv << " kv";
  }
  return os.str();
}

Step parse_step(std::string_view text) {
  if (text.size() == 1 && text[0] >= 'a' && text[0] <= 'd') return preset_step(text[0]);
  Step step;
  step.name = std::string(text);
  size_t begin = 0;
  while (true) {
    const size_t end = text.find_first_of(",+", begin);
    parse_term(text.substr(begin, end == std::string_view::npos ? end : end - begin),
               step.requests);
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  if (step.total_q() > kMaxStepTokens) {
    throw UsageError("--step: more than " + std::to_string(kMaxStepTokens) + " q tokens in '" +
                     step.name + "'");
  }
  // Prefill chunks first, then decodes grouped by q_len (stable: the written order otherwise).
  std::stable_sort(step.requests.begin(), step.requests.end(),
                   [](const StepRequest& a, const StepRequest& b) {
                     const int ka = a.decode() ? a.q_len : 0, kb = b.decode() ? b.q_len : 0;
                     return ka < kb;
                   });
  return step;
}

Step preset_step(char which) {
  const char* text = "";
  switch (which) {
    case 'a':  // 4 prefill chunks mid-prompt, 124 decodes
      text = "2048@0,2048@0,2048@4096,2048@8192,124x1@4096";
      break;
    case 'b':  // one long chunk, 255 decodes over a spread of contexts
      text = "8192@0,255x1@2048..16384";
      break;
    case 'c':  // pure decode
      text = "128x1@8192";
      break;
    case 'd':  // pure prefill
      text = "8x2048@0";
      break;
    default:
      throw UsageError(std::string("--step: no preset '") + which + "' (a, b, c or d)");
  }
  Step step = parse_step(text);
  step.name = std::string(1, which);
  return step;
}

Step small_step() {
  Step step = parse_step("96@0,64@160,6x1@32..256,2x4@300");
  step.name = "small";
  return step;
}

double request_visible_pairs(int64_t q_len, int64_t kv_len, bool causal, const Window& window) {
  double pairs = 0;
  for (int64_t i = 0; i < q_len; ++i) {
    const int64_t diag = i + kv_len - q_len;
    int64_t lo = 0, hi = kv_len;
    if (causal) hi = std::min(hi, diag + 1);
    if (window.left >= 0) lo = std::max(lo, diag - window.left);
    if (window.right >= 0) hi = std::min(hi, diag + window.right + 1);
    pairs += static_cast<double>(std::max<int64_t>(0, hi - lo));
  }
  return pairs;
}

double step_visible_pairs(const Step& step, bool causal, const Window& window) {
  double pairs = 0;
  for (const StepRequest& r : step.requests) {
    pairs += request_visible_pairs(r.q_len, r.kv_len(), causal, window);
  }
  return pairs;
}

}  // namespace hopattn::cli
