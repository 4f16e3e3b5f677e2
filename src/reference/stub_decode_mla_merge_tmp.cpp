// Temporary until decode.cpp / mla.cpp / merge.cpp land.
#include "hopattn/error.hpp"
#include "reference/reference.hpp"
namespace hopattn::reference {
void decode(const DecodeArgs&, const DecodeOptions&) { throw Error(ErrorKind::kNotImplemented, "decode"); }
void mla(const MlaArgs&, const MlaOptions&) { throw Error(ErrorKind::kNotImplemented, "mla"); }
void merge_states(const MergeArgs&) { throw Error(ErrorKind::kNotImplemented, "merge"); }
void merge_states_n(const MergeNArgs&) { throw Error(ErrorKind::kNotImplemented, "merge"); }
}
