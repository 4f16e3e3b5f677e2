// Temporary until fwd.cpp / bwd.cpp land.
#include "hopattn/error.hpp"
#include "reference/reference.hpp"
namespace hopattn::reference {
void attention_fwd(const FwdArgs&, const AttentionOptions&) { throw Error(ErrorKind::kNotImplemented, "fwd"); }
void attention_bwd(const BwdArgs&, const AttentionOptions&) { throw Error(ErrorKind::kNotImplemented, "bwd"); }
}
