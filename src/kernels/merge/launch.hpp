// Host entry points of the merge_states kernels; includable without CUDA headers. The
// definitions exist only in CUDA builds (HOPATTN_WITH_CUDA). Arguments are expected to be
// validated (src/api/validate_merge.cpp) and on one CUDA device.
#pragma once

#include "hopattn/options.hpp"

namespace hopattn::kernels::merge {

// Both launch as programmatic dependents of the kernel before them in the stream (which usually
// wrote the states: ptx/grid_dependency.cuh), so that the launch overlaps that kernel's tail.

// out = merge of (o_a, lse_a) and (o_b, lse_b); lse natural log (DESIGN.md).
void launch_merge_states(const MergeArgs& args, Stream stream);

// out = merge of the n states o[:, k], lse[:, k].
void launch_merge_states_n(const MergeNArgs& args, Stream stream);

}  // namespace hopattn::kernels::merge
