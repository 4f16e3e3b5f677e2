// Host entry of the bwd kernel family (no CUDA headers: included by src/api/dispatch.cpp, also in
// builds without CUDA, where the workspace size is still answered).
#pragma once

#include <cstddef>

#include "hopattn/options.hpp"
#include "kernels/bwd/workspace.hpp"
#include "plan/bwd_order.hpp"

namespace hopattn::kernels::bwd {

// Bytes of workspace a CUDA call needs: a pure host function of the shapes (workspace.hpp).
inline size_t workspace_size(const BwdArgs& args) { return workspace_layout(args).total; }

// Throws hopattn::Error(kNotImplemented) naming the first feature of this call that the CUDA
// kernels do not provide (head dims, paged KV, host-resident cu_seqlens, ...).
void check_supported(const BwdArgs& args, const AttentionOptions& opts);

// Launch variants kept to be timed against the default (the benchmark sets them; the public API
// runs the defaults). Results are the same either way up to the order of dQ's additions.
struct LaunchOptions {
  plan::BwdOrder order = plan::BwdOrder::kSections;  // CTA launch order (plan/bwd_order.hpp)
};

// Runs preprocess, main kernel and postprocess on `stream`. Arguments must have passed
// validate::attention_bwd (the workspace included); unsupported ones throw as check_supported.
void run(const BwdArgs& args, const AttentionOptions& opts, Stream stream,
         const LaunchOptions& launch = {});

}  // namespace hopattn::kernels::bwd
