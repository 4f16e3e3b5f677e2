// Temporary: replaced family by family.
#include "hopattn/error.hpp"
#include "reference/reference.hpp"
namespace hopattn::reference {
void attention_fwd(const FwdArgs&, const AttentionOptions&) { throw Error(ErrorKind::kNotImplemented, "fwd"); }
void attention_bwd(const BwdArgs&, const AttentionOptions&) { throw Error(ErrorKind::kNotImplemented, "bwd"); }
void decode(const DecodeArgs&, const DecodeOptions&) { throw Error(ErrorKind::kNotImplemented, "decode"); }
void mla(const MlaArgs&, const MlaOptions&) { throw Error(ErrorKind::kNotImplemented, "mla"); }
void merge_states(const MergeArgs&) { throw Error(ErrorKind::kNotImplemented, "merge"); }
void merge_states_n(const MergeNArgs&) { throw Error(ErrorKind::kNotImplemented, "merge"); }
}
