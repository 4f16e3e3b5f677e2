// Host entry point of the MLA kernel; includable without CUDA headers. The definition exists
// only in CUDA builds (HOPATTN_WITH_CUDA). Arguments are expected to be validated
// (src/api/validate_mla.cpp) and on one CUDA device.
#pragma once

#include "hopattn/options.hpp"
#include "plan/mla_plan.hpp"

namespace hopattn::kernels::mla {

// Launches on `stream` (no allocation, no synchronization; CUDA-graph capturable): the MLA
// kernel, and with num_splits > 1 the merge of its partial states (a second kernel node).
void launch(const MlaArgs& args, const MlaOptions& opts, Stream stream);

}  // namespace hopattn::kernels::mla
