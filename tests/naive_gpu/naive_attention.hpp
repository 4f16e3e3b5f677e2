// Naive fp32 CUDA reference of the fwd and decode math: one query row of one head per thread
// block, fp32 accumulation, no tiling tricks. It computes exactly the semantics of the CPU
// reference (src/reference/) on CUDA tensors, so model-sized problems can be checked and timed
// on the GPU where the double-precision CPU reference would take minutes.
//
// Includable without CUDA headers; the definitions exist only in CUDA builds (HOPATTN_WITH_CUDA).
// Every tensor, index tensors included (cu_seqlens, kv_lens, page tables, sinks, per-head
// scales, tree masks), must live on the same CUDA device. Arguments are expected to be valid
// (src/api/validate.hpp); only what would make the launch itself meaningless is checked here.
// CUDA failures raise hopattn::Error of kind kRuntime with the CUDA error string.
#pragma once

#include "hopattn/options.hpp"

namespace hopattn::naive {

// Dense, varlen (cu_seqlens_q/k) or paged (args.pages, NHD or HND, block table or CSR) forward.
// Varlen/paged q: the grid covers args.max_seqlen_q rows per request when it is set, else
// q.size(0) rows (always enough, slower).
void naive_attention_fwd(const FwdArgs& args, const AttentionOptions& opts,
                         Stream stream = nullptr);

// Paged decode: q [B, q_len, Hq, D], KV bf16/fp16/fp8 e4m3/e5m2/int8 with per-tensor or
// per-head scales, tree mask, beams whose shared prefix is read through the first beam's pages.
void naive_decode(const DecodeArgs& args, const DecodeOptions& opts, Stream stream = nullptr);

}  // namespace hopattn::naive
