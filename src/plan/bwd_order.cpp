#include "plan/bwd_order.hpp"

#include <algorithm>

namespace hopattn::plan {

int bwd_section_groups(int64_t group_bytes, int groups) {
  constexpr int64_t kL2Budget = int64_t{40} << 20;
  if (groups <= 1) return 1;
  const int64_t fit =
      group_bytes <= 0 ? groups : std::clamp<int64_t>(kL2Budget / group_bytes, 1, groups);
  const int64_t count = (groups + fit - 1) / fit;
  return static_cast<int>((groups + count - 1) / count);
}

// Sections start the longest causal blocks of several groups first; without a causal mask every
// block of a group is about as long, and group after group (sections of one group) keeps a group's
// q rows hot in L2: measured on the H200 (2026-11-29, B=1 S=8192 16 heads hd128 non-causal) 623
// TFLOP/s against 595 with sections, while the deterministic mode, whose CTAs wait on each other
// per tile, ran 480 with sections and 415 without. Deterministic and causal together walk group
// after group again: H100 (2026-12-05, run set w), heads / sections time: hd128 B=16 1k 0.847,
// B=4 4k 0.882, B=1 16k 0.980, hd64 B=4 4k 0.954 (MHA, sections of 10+ groups); Llama 32 / 8
// B=2 8k 1.003 (sections of 2 groups: nearly the same walk).
int bwd_launch_section(const BwdOrderShape& s, const AttentionOptions& opts, BwdOrder order) {
  if (order == BwdOrder::kHeads || opts.causal == opts.deterministic || s.kv_heads < 1) {
    return 1;
  }
  const int64_t group_bytes = int64_t{s.q_heads / s.kv_heads} * s.max_seqlen_q *
                              (2 * s.head_dim_qk + 2 * s.head_dim_v + 4 * s.head_dim_qk);
  return bwd_section_groups(group_bytes, s.kv_heads * s.batch);
}

}  // namespace hopattn::plan
