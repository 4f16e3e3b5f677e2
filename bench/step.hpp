// The serving step `hopattn bench batch` runs: prefill chunks and decodes over one paged cache,
// from a preset (--step a|b|c|d) or a composition written out (--step "2048@0,124x1@4096").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hopattn/options.hpp"

namespace hopattn::cli {

// Longest q of a request the decode family takes: shorter requests are the step's decodes.
inline constexpr int kMaxDecodeQLen = 16;

struct StepRequest {
  int q_len = 1;   // new tokens
  int cached = 0;  // tokens already in the cache
  int kv_len() const { return q_len + cached; }
  bool decode() const { return q_len <= kMaxDecodeQLen; }
};

// Requests in run order: prefill chunks (q_len > 16) first as written, then decodes by q_len
// (so the separate-launch alternative runs contiguous slices of q).
struct Step {
  std::string name;  // the preset letter or the text given
  std::vector<StepRequest> requests;

  int prefills() const;
  int decodes() const { return static_cast<int>(requests.size()) - prefills(); }
  int64_t total_q() const;
  int64_t total_kv() const;
  int max_q_len() const;
  int max_kv_len() const;
  // "a: 4 prefill + 124 decode, 8316 q, 524 k kv" (a custom text of up to 40 characters as the
  // name, else "custom").
  std::string describe() const;
};

// --step: "a" | "b" | "c" | "d" or TERM[,TERM...] ('+' separates terms too), where TERM is
// [Nx]NEW[@CACHED] or [Nx]NEW@LO..HI (N cached lengths spread evenly over LO..HI). Raises
// UsageError naming the term at fault.
Step parse_step(std::string_view text);
// The presets (Llama-3.1-8B serving steps; see bench_help()).
Step preset_step(char which);
// The CPU tour's and the CPU bench's default: a few short requests.
Step small_step();

// Keys the q_len rows of one request see, summed (bottom-right aligned causal mask and window as
// in DESIGN.md).
double request_visible_pairs(int64_t q_len, int64_t kv_len, bool causal, const Window& window);
// Query/key pairs a query row sees, summed over the step (causal and window as in DESIGN.md).
double step_visible_pairs(const Step& step, bool causal, const Window& window);

}  // namespace hopattn::cli
