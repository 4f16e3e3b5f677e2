// The parameters of one fwd kernel launch, built on the host (launch.cu): for fwd::run and for
// callers that launch their own instantiation of the fwd kernel over the same tensors (the batch
// family's persistent launch, src/kernels/batch/launch.cu). CUDA-only (FwdParams holds tensor
// maps).
#pragma once

#include "hopattn/options.hpp"
#include "kernels/fwd/launch.hpp"
#include "kernels/fwd/traits.cuh"

namespace hopattn::kernels::fwd {

// Sequence, mask, softmax, output, GQA-packing and scheduler parameters, and (when the call has
// a tile at all, p.sched.total_tiles > 0) the tensor maps of q, out, K and V and the KV source
// for a configuration of `block_n` keys per KV tile and `block_m` query rows per tile (its
// Traits::kBlockN and kBlockM). `args` must have passed check_supported.
FwdParams prepare_params(const FwdArgs& args, const AttentionOptions& opts,
                         const LaunchOptions& launch, int device, int block_n, int block_m);

}  // namespace hopattn::kernels::fwd
