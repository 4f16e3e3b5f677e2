// fwd and bwd entry points with the kernels' launch variants explicit: what the benchmark calls to
// time a variant against the default (hopattn bench fwd --paged-tma off, bench bwd --bwd-order
// heads). The public attention_fwd / attention_bwd are these with default LaunchOptions: the
// library never picks a variant itself and reads no environment. CPU tensors ignore the options.
#pragma once

#include "hopattn/options.hpp"
#include "kernels/bwd/launch.hpp"
#include "kernels/fwd/launch.hpp"

namespace hopattn::internal {

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts, Stream stream,
                   const kernels::fwd::LaunchOptions& launch);
void attention_bwd(const BwdArgs& args, const AttentionOptions& opts, Stream stream,
                   const kernels::bwd::LaunchOptions& launch);

}  // namespace hopattn::internal
