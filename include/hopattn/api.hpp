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

// ---- device-side errors (README, "Safety contract")
// Index arrays that live on the device (page tables, kv_lens, cu_seqlens) cannot be checked at
// call time without a sync. The kernels bounds-check each index where they use it, never
// dereference a bad one, and record the first violation in a status word of the device.
// check_errors synchronizes `stream` (the one sync, when the caller chooses), then throws
// hopattn::Error (ErrorKind::kDeviceIndex) naming the family, the request, the value and its
// bound, and clears the word; it returns quietly when nothing was recorded, and also reports a
// fault of the stream's earlier work. Throws kValue while `stream` is capturing a CUDA graph.
// No-op in builds without CUDA (CPU calls check their index arrays before they run).
void check_errors(Stream stream = nullptr);

// Debug mode (off by default; process-wide, thread-safe): every call on CUDA tensors first copies
// its device-resident index arrays (and per-head scales, sinks) to the host, synchronizing the
// stream, and validates them as a CPU call would, throwing hopattn::Error before any launch.
// Slow by design; a call inside a CUDA graph capture throws while it is on.
void set_debug(bool enabled);
bool debug_enabled();

}  // namespace hopattn
