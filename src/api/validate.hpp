// Argument validation of every public entry point. Each function throws hopattn::Error (message:
// what was expected, what was given) on the first bad argument and touches no tensor data except
// host-resident index tensors (cu_seqlens, page tables, lengths), whose values it bounds-checks.
#pragma once

#include "hopattn/options.hpp"

namespace hopattn::validate {

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts);
void attention_bwd(const BwdArgs& args, const AttentionOptions& opts);
void decode(const DecodeArgs& args, const DecodeOptions& opts);
void mla(const MlaArgs& args, const MlaOptions& opts);
void merge_states(const MergeArgs& args);
void merge_states_n(const MergeNArgs& args);

}  // namespace hopattn::validate
