// Host entry points of the merge_states kernels; includable without CUDA headers. The
// definitions exist only in CUDA builds (HOPATTN_WITH_CUDA). Arguments are expected to be
// validated (src/api/validate_merge.cpp) and on one CUDA device.
#pragma once

#include "hopattn/options.hpp"

namespace hopattn::kernels::merge {

// out = merge of (o_a, lse_a) and (o_b, lse_b); lse natural log (DESIGN.md).
void launch_merge_states(const MergeArgs& args, Stream stream);

// out = merge of the n states o[:, k], lse[:, k]. after_kernel: launched as a programmatic
// dependent of the kernel before it in the stream (which wrote the states and lets it launch
// early: ptx/grid_dependency.cuh), so that this launch overlaps that kernel's tail.
void launch_merge_states_n(const MergeNArgs& args, Stream stream, bool after_kernel = true);

}  // namespace hopattn::kernels::merge
