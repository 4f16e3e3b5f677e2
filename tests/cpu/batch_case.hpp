// Test-side construction of batch steps (used by batch_api_test.cpp and batch_api_errors_test.cpp):
// a BatchAttention configuration, a serving step of requests with their q tokens, paged caches
// (decode_case.hpp's scatter: shuffled pages, poisoned unused slots, a strided block table), and
// the expected result from hopattn's own fwd and decode entry points run on each request alone.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "decode_case.hpp"
#include "hopattn/batch.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::batch_case {

struct BatchCase {
  int kv_heads = 2, group = 1, head_dim = 64, head_dim_v = 0, page_size = 16;
  KVLayout layout = KVLayout::kNHD;
  DType q_dtype = DType::kFP32;
  DType cache_dtype = DType::kFP32;
  bool per_head_scales = false;  // 8-bit caches (16-bit ones are compared unscaled)
  bool causal = true;
  Window window{};
  float softcap = 0.f;
  std::optional<float> scale;
  bool sinks = false;
  int num_ctas = 0;  // 0: the default grid
  int max_batch = 16, max_tokens = 1024;
  std::vector<int> q_lens, kv_lens;  // the step
  int pad_rows = 3;                  // rows of q / out / lse past the step's tokens (never written)
  int cache_pad = 0;                 // extra elements after each cache head row (pool strides)

  int q_heads() const { return kv_heads * group; }
  int dv() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
};

std::string describe(const BatchCase& c);
BatchAttentionConfig config_of(const BatchCase& c);

// The tensors of one step: q / out / lse with pad_rows extra rows, caches, lengths, page table.
struct BatchStep {
  std::vector<int32_t> cu, kv;
  HostTensor q, out, lse, cu_t, kv_t, sinks, k_heads, v_heads;
  std::vector<double> k_scale, v_scale;  // per KV head
  // One pool for K and one for V, scattered over the same shuffled pages (V's own head dim).
  std::unique_ptr<decode_case::PagedKV> k_cache, v_cache;
  BatchArgs args;
  int total_q() const { return cu.back(); }
};

// Random data for `c` (q in [-2, 2), caches per decode_case, scales, sinks); out / lse poisoned.
std::unique_ptr<BatchStep> make_step(const BatchCase& c, std::mt19937_64& rng);

// out [rows, Hq, Dv] and lse [rows, Hq] of each request computed alone by hopattn::decode (q_len
// <= 16) or hopattn::attention_fwd over the paged cache (longer requests; an 8-bit cache goes in
// dequantized); rows no request owns hold NaN.
struct Expected {
  HostTensor out, lse;
};
Expected per_request_reference(const BatchCase& c, const BatchStep& s);

// "" when s.args.out / lse match `e` on the step's rows (within the q dtype's rounding; the same
// -inf rows) and the pad rows still hold the poison; else the first mismatch.
std::string compare(const BatchCase& c, const BatchStep& s, const Expected& e);

}  // namespace hopattn::testing::batch_case
