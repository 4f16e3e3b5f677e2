// The host replay of the fwd walk (plan/fwd_walk_replay.hpp): its figures against
// tools/fwd_walk_replay.py on the rows timed on an H100 (run set w), the walk it picks there
// against the one that ran faster, and the edge cases.
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/fwd_walk_replay.hpp"

namespace hopattn::plan {
namespace {

// A dense causal hd64 call of 192-row tiles on 132 SMs: S = q_len = kv_len, section from a 50 MB
// L2 as the launch computes it (K and V of one KV head; GQA `group` q heads share it).
FwdWalkShape hd64_causal(int64_t s, int64_t heads, int64_t batch, int64_t group) {
  FwdWalkShape w;
  w.rows = 192;
  w.seqlen_q = w.seqlen_k = s;
  w.pairs = heads * batch;
  w.section = std::min<int64_t>(
      std::max<int64_t>(1, (25 << 20) / (std::max<int64_t>(s, 1) * 64 * 4)) * group, w.pairs);
  w.grid = 132;
  return w;
}

struct TimedRow {
  int64_t s, heads, batch, group;
  double plain, paired;  // tools/fwd_walk_replay.py S heads B 64 192 group
  bool paired_faster;    // H100, run set w: `--kv-tiles wide --fwd-walk paired` against `plain`
};

constexpr TimedRow kTimedRows[] = {
    {512, 32, 32, 1, 1.063, 1.160, false},  // 1.043 vs 0.985 of the base tiles' time
    {2048, 32, 8, 1, 1.215, 1.119, true},   // 0.944 vs 1.035
    {4096, 32, 4, 1, 1.237, 1.034, true},   // 0.879 vs 1.045
    {8192, 32, 2, 1, 1.344, 1.079, true},   // 0.869 vs 1.053
    {16384, 32, 1, 1, 1.356, 1.055, true},  // 0.841 vs 1.049
    {8192, 32, 2, 4, 1.062, 1.077, false},  // 0.855 vs 0.839
    {2048, 32, 8, 4, 1.059, 1.114, false},  // 0.936 vs 0.878
    {6144, 16, 3, 1, 1.266, 1.031, true},   // 0.829 vs 1.006
};

TEST(PlanFwdWalkReplay, MatchesThePythonReplayAndTheTimedWalks) {
  for (const TimedRow& r : kTimedRows) {
    const FwdWalkShape w = hd64_causal(r.s, r.heads, r.batch, r.group);
    SCOPED_TRACE(testing::Message() << "S " << r.s << " heads " << r.heads << " B " << r.batch
                                    << " group " << r.group);
    EXPECT_NEAR(fwd_walk_busiest_over_mean(w, false), r.plain, 5e-4);
    EXPECT_NEAR(fwd_walk_busiest_over_mean(w, true), r.paired, 5e-4);
    EXPECT_EQ(fwd_pair_by_replay(w), r.paired_faster);
    EXPECT_EQ(fwd_pair_by_replay(w), r.paired_faster);  // the remembered answer
  }
}

// Many shapes through the per-thread memory of 8: every answer still the replay's own.
TEST(PlanFwdWalkReplay, RememberedAnswersStayTheReplays) {
  for (int round = 0; round < 2; ++round) {
    for (int64_t s = 1024; s <= 20 * 1024; s += 1024) {
      const FwdWalkShape w = hd64_causal(s, 32, 2, 1);
      EXPECT_EQ(fwd_pair_by_replay(w),
                fwd_walk_busiest_over_mean(w, true) < fwd_walk_busiest_over_mean(w, false));
    }
  }
}

TEST(PlanFwdWalkReplay, EdgeCases) {
  FwdWalkShape w = hd64_causal(4096, 32, 4, 1);
  w.grid = 0;
  EXPECT_EQ(fwd_walk_busiest_over_mean(w, false), 1.0);
  w = hd64_causal(0, 32, 4, 1);
  EXPECT_EQ(fwd_walk_busiest_over_mean(w, true), 1.0);
  EXPECT_FALSE(fwd_pair_by_replay(w));
  // One unit a CTA, all equal (one m-block, paired with the empty one): perfectly even.
  w = hd64_causal(100, 132, 1, 1);
  EXPECT_DOUBLE_EQ(fwd_walk_busiest_over_mean(w, true), 1.0);
  EXPECT_DOUBLE_EQ(fwd_walk_busiest_over_mean(w, false), 1.0);
  // q longer than kv (bottom-right causal): the first tiles see no key and cost their fixed
  // block only; still a finite ratio >= 1.
  w = hd64_causal(4096, 32, 4, 1);
  w.seqlen_k = 1000;
  EXPECT_GE(fwd_walk_busiest_over_mean(w, false), 1.0);
  // A long walk (a step a run of equal units): 2^16 m-blocks over 256 pairs, paired units equal.
  w = hd64_causal(4096, 32, 4, 1);
  w.seqlen_q = w.seqlen_k = (int64_t{1} << 16) * w.rows;
  w.pairs = 256;
  w.section = 16;
  EXPECT_LT(fwd_walk_busiest_over_mean(w, true), 1.01);
}

}  // namespace
}  // namespace hopattn::plan
