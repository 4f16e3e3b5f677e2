// Temporary: replaced by the validators.
#include "api/validate.hpp"
namespace hopattn::validate {
void attention_fwd(const FwdArgs&, const AttentionOptions&) {}
void attention_bwd(const BwdArgs&, const AttentionOptions&) {}
void decode(const DecodeArgs&, const DecodeOptions&) {}
void mla(const MlaArgs&, const MlaOptions&) {}
void merge_states(const MergeArgs&) {}
void merge_states_n(const MergeNArgs&) {}
}
