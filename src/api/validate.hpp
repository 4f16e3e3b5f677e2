// Argument validation of every public entry point. Each function throws hopattn::Error (message:
// what was expected, what was given) on the first bad argument and touches no tensor data except
// host-resident index tensors (cu_seqlens, page tables, lengths), whose values it bounds-checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hopattn/batch.hpp"
#include "hopattn/options.hpp"

namespace hopattn::validate {

// The step a BatchAttention planned last: what run() checks its arguments against.
struct BatchPlanned {
  int batch = -1;                         // -1: no plan yet
  const int32_t* cu_seqlens_q = nullptr;  // [batch + 1], as plan() saw them
  const int32_t* kv_lens = nullptr;       // [batch]
  int max_kv_len = 0;
};

// Whether the validators read the values of a CUDA call's index tensors (and sinks, per-head
// scales). kUnread on every launch. kHostCopies: debug mode (src/api/debug_mode.hpp) replaced
// each of them by a view of a host copy that keeps the tensor's device, shape and strides.
enum class DeviceValues { kUnread, kHostCopies };

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts,
                   DeviceValues values = DeviceValues::kUnread);
void attention_bwd(const BwdArgs& args, const AttentionOptions& opts,
                   DeviceValues values = DeviceValues::kUnread);
void decode(const DecodeArgs& args, const DecodeOptions& opts,
            DeviceValues values = DeviceValues::kUnread);
void mla(const MlaArgs& args, const MlaOptions& opts, DeviceValues values = DeviceValues::kUnread);
void merge_states(const MergeArgs& args);
void merge_states_n(const MergeNArgs& args);
// BatchAttention: its configuration (the planner checks the limits), the host tensors plan()
// reads, and run()'s arguments against the configuration and the plan.
void batch_config(const BatchAttentionConfig& config);
void batch_plan(const TensorView& cu_seqlens_q, const TensorView& kv_lens);
void batch_run(const BatchArgs& args, const BatchAttentionConfig& config,
               const BatchPlanned& planned, size_t workspace_bytes,
               DeviceValues values = DeviceValues::kUnread);

}  // namespace hopattn::validate
