// Public entry points. Each validates every argument (throwing hopattn::Error before anything is
// written), then runs the CPU reference for CPU tensors or the GPU kernel for CUDA tensors on
// `stream`. No entry point allocates memory or synchronizes the device.
#pragma once

#include <cstddef>

#include "hopattn/options.hpp"

namespace hopattn {

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts, Stream stream = nullptr);

size_t attention_bwd_workspace_size(const BwdArgs& args, const AttentionOptions& opts);
void attention_bwd(const BwdArgs& args, const AttentionOptions& opts, Stream stream = nullptr);

// Bytes of workspace decode needs (0: none). Zero it once after allocating; calls keep it valid
// for the next call (options.hpp, Workspace).
size_t decode_workspace_size(const DecodeArgs& args, const DecodeOptions& opts);
void decode(const DecodeArgs& args, const DecodeOptions& opts, Stream stream = nullptr);

// Bytes of workspace mla needs (0: none): a pure host function of the shapes.
size_t mla_workspace_size(const MlaArgs& args, const MlaOptions& opts);
void mla(const MlaArgs& args, const MlaOptions& opts, Stream stream = nullptr);

void merge_states(const MergeArgs& args, Stream stream = nullptr);
void merge_states_n(const MergeNArgs& args, Stream stream = nullptr);

// True when this build contains GPU kernels (compiled with the CUDA toolkit).
bool built_with_cuda();

}  // namespace hopattn
