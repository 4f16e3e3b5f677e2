// Host entry of the bwd kernel family (no CUDA headers: included by src/api/dispatch.cpp, also in
// builds without CUDA, where the workspace size is still answered).
#pragma once

#include <cstddef>

#include "hopattn/options.hpp"
#include "kernels/bwd/workspace.hpp"

namespace hopattn::kernels::bwd {

// Bytes of workspace a CUDA call needs: a pure host function of the shapes (workspace.hpp).
inline size_t workspace_size(const BwdArgs& args) { return workspace_layout(args).total; }

// Throws hopattn::Error(kNotImplemented) naming the first feature of this call that the CUDA
// kernels do not provide (head dims, paged KV, host-resident cu_seqlens, ...).
void check_supported(const BwdArgs& args, const AttentionOptions& opts);

// Runs preprocess, main kernel and postprocess on `stream`. Arguments must have passed
// validate::attention_bwd (the workspace included); unsupported ones throw as check_supported.
void run(const BwdArgs& args, const AttentionOptions& opts, Stream stream);

}  // namespace hopattn::kernels::bwd
