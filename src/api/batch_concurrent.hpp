// The decode-family calls of a mixed step's concurrent form (plan::BatchConcurrentForm): one
// DecodeArgs per run of decodes, views into run()'s tensors (no copy, no allocation).
#pragma once

#include <cstdint>

#include "hopattn/batch.hpp"
#include "hopattn/options.hpp"
#include "plan/batch_plan.hpp"

namespace hopattn::batch_concurrent {

// The options of a decode call of a step: the configuration's mask, softcap and scale, one split
// (the form is planned only where the decodes fill their SMs unsplit, so no workspace), and the
// narrow kernel where `kernel` asks for it and the call `decode` takes it.
DecodeOptions decode_options(const BatchAttentionConfig& config, const DecodeArgs& decode,
                             DecodeKernel kernel);

// Requests [run.begin, run.end) of the step as one decode call: q / out rows cu_seqlens_q[begin]
// .. + n * q_len as [n, q_len, H, D] (lse [n, q_len, Hq]), their page-table rows and kv_lens, the
// caches, sinks and scales as given. `cu_seqlens_q`: the host values plan() saw.
DecodeArgs decode_args(const BatchArgs& args, const BatchAttentionConfig& config,
                       const int32_t* cu_seqlens_q, const plan::BatchDecodeRun& run);

}  // namespace hopattn::batch_concurrent
