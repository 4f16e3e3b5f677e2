// Reading a batch plan back from its bytes, as a kernel would, and checking it against an
// independent statement of what it must do (used by batch_plan_test.cpp and its siblings):
//   - every (request, q row, q head, key) pair a query sees is computed exactly once: for each
//     run of packed rows, the KV ranges of the items covering it are disjoint and their union
//     holds every key those rows see (ranges, not a loop over keys);
//   - every row is written exactly once: by its one direct item, or by one merge record whose
//     partial blocks are exactly the split items' blocks, in ascending KV order;
//   - each item's keys are clipped to what its rows see, split points are chunk-aligned, and no
//     work is scheduled that no row needs;
//   - the busiest CTA costs at most the mean plus the largest item (LPT's bound), and every CTA
//     runs its items largest first (with BatchPlanLimits::spread_decodes: within each kind);
//   - the plan fits the static workspace query, and a guard region after it stays untouched;
//   - a concurrent form (BatchPlanLimits::concurrent_decodes) runs exactly the step's decodes
//     and plans every prefill row exactly once on its prefill CTAs alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/batch_plan.hpp"

namespace hopattn::plan::check {

inline constexpr unsigned char kFill = 0xA5;  // what a buffer holds where nothing was written
inline constexpr size_t kGuardBytes = 4096;   // checked past the static workspace size

// DESIGN.md's visibility rule, literally: query i of q_len sees key j iff j < kv_len and,
// bottom-right aligned (diag = i + kv_len - q_len), j <= diag when causal and
// diag - left <= j <= diag + right.
bool rule_visible(const BatchPlanLimits& l, int64_t i, int64_t j, int64_t q_len, int64_t kv_len);

struct KeyRange {
  int64_t lo, hi;
};
// The same rule as one interval per query (BatchPlanVisibility checks it against rule_visible).
KeyRange row_keys(const BatchPlanLimits& l, int64_t i, int64_t q_len, int64_t kv_len);

// A serving step: q offsets and KV lengths of its requests.
struct Step {
  std::vector<int32_t> cu;  // [B + 1]
  std::vector<int32_t> kv;  // [B]
  int batch() const { return static_cast<int>(kv.size()); }
  int64_t q_len(int b) const { return int64_t{cu[b + 1]} - cu[b]; }
};
Step step_of(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& kv_lens);
std::string describe(const BatchPlanLimits& l);
std::string describe(const Step& s);

// Llama-3.1-8B attention (32 q heads, 8 KV heads, hd 128, page 16, causal) on `ctas` CTAs.
BatchPlanLimits llama8b(int ctas = 264);

// A plan buffer of the static size, 16-byte aligned, followed by kGuardBytes; all kFill.
class Buffer {
 public:
  explicit Buffer(size_t plan_bytes);
  unsigned char* data();
  size_t usable() const;  // the size handed to plan()
  void refill();

 private:
  std::vector<unsigned char> bytes_;
};

struct Plan {
  BatchPlanHeader header;
  std::vector<int32_t> cta_offsets;
  std::vector<BatchWorkItem> items;  // in buffer order (CTA by CTA)
  std::vector<BatchMergeRecord> merges;
};
Plan read_plan(const unsigned char* base);

// BatchPlanLimits::l2_bytes, plainly: each request's prefill section's rank in the plan's order
// (0 first), or 0 for every request where the plan has no sections (no L2 named, or a mixed
// step not partitioned). Sections: consecutive requests with prefill items while their K/V
// (16-bit rows of Dqk + Dv, every KV head) fits fwd_section_bytes; ranked by their costliest
// item, ties to the earlier section.
std::vector<int> prefill_section_ranks(const BatchPlanLimits& l, const Step& s, const Plan& p,
                                       const BatchPlanInfo& info);

// Every invariant above for the plan at `base` of step `s`: "" when all hold, else the first
// violation.
std::string verify(const BatchPlanLimits& l, const Step& s, const BatchPlanInfo& info,
                   const unsigned char* base);
// Plans `s` with `planner` into `buf` (refilled first) and verifies it; an exception from plan()
// is a failure too.
std::string plan_and_verify(BatchPlanner& planner, const Step& s, Buffer& buf,
                            BatchPlanInfo* info_out = nullptr);

}  // namespace hopattn::plan::check
