// CPU reference of every operation: double accumulation, readable over fast. Arguments are
// already validated (src/api/validate.hpp) and every tensor lives in host memory.
#pragma once

#include "hopattn/batch.hpp"
#include "hopattn/options.hpp"

namespace hopattn::reference {

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts);
void attention_bwd(const BwdArgs& args, const AttentionOptions& opts);
void decode(const DecodeArgs& args, const DecodeOptions& opts);
void mla(const MlaArgs& args, const MlaOptions& opts);
void merge_states(const MergeArgs& args);
void merge_states_n(const MergeNArgs& args);
// The batch family through `plan`, a BatchPlanner plan of this step (src/plan/batch_plan.hpp)
// made for `config`: partial_o / partial_lse are host scratch of the planner's capacity (split
// items' partial states).
void batch(const BatchArgs& args, const BatchAttentionConfig& config, const void* plan,
           float* partial_o, float* partial_lse);

}  // namespace hopattn::reference
