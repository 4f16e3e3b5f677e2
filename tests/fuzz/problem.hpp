// The host tensors of a fuzz case: build() draws the random data from the case's seed and lays
// it out as the family's argument struct wants (pages shuffled, unused slots and outputs
// poisoned), keeping the logical data next to it for implementations that work from that.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "case.hpp"
#include "cpu/naive_merge.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::fuzz {

// Merge inputs: T x H x n states (as stored: o rounded to the state dtype, lse to fp32) and the
// tensors of both entry points over them.
struct MergeRun {
  std::vector<testing::naive::State> states;  // index (t * H + h) * n + k
  std::vector<testing::HostTensor> buffers;
  MergeArgs two;  // n == 2 only
  MergeNArgs many;
};

struct HostProblem {
  Case c;
  std::unique_ptr<testing::fwd_bwd::Problem> attn;   // fwd, bwd: logical data ...
  std::unique_ptr<testing::fwd_bwd::Bundle> bundle;  // ... and its tensors
  std::unique_ptr<testing::decode_case::DecodeRun> decode;
  std::unique_ptr<testing::mla_case::MlaRun> mla;
  std::unique_ptr<MergeRun> merge;
  std::unique_ptr<testing::batch_case::BatchStep> batch;
  // Batch: what the public API's call does between BatchAttention::plan and run (a corruption
  // that changes the step's lengths after planning; empty: nothing).
  std::function<void()> between_plan_and_run;
};

std::unique_ptr<HostProblem> build(const Case& c);

}  // namespace hopattn::fuzz
