// CPU reference of every operation: double accumulation, readable over fast. Arguments are
// already validated (src/api/validate.hpp) and every tensor lives in host memory.
#pragma once

#include "hopattn/options.hpp"

namespace hopattn::reference {

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts);
void attention_bwd(const BwdArgs& args, const AttentionOptions& opts);
void decode(const DecodeArgs& args, const DecodeOptions& opts);
void mla(const MlaArgs& args, const MlaOptions& opts);
void merge_states(const MergeArgs& args);
void merge_states_n(const MergeNArgs& args);

}  // namespace hopattn::reference
