// Smallest useful hopattn program: attention of 2 queries over 3 keys on the CPU.
#include <cmath>
#include <cstdio>
#include <vector>

#include "hopattn/hopattn.hpp"

int main() {
  using hopattn::DType;
  using hopattn::TensorView;
  const int b = 1, sq = 2, sk = 3, h = 1, d = 4;
  std::vector<float> q(b * sq * h * d), k(b * sk * h * d), v(b * sk * h * d);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.1f * float(i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = 0.05f * float(i % 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  std::vector<float> out(q.size()), lse(b * sq * h);

  hopattn::FwdArgs args;
  args.q = TensorView(q.data(), DType::kFP32, {b, sq, h, d});
  args.k = TensorView(k.data(), DType::kFP32, {b, sk, h, d});
  args.v = TensorView(v.data(), DType::kFP32, {b, sk, h, d});
  args.out = TensorView(out.data(), DType::kFP32, {b, sq, h, d});
  args.lse = TensorView(lse.data(), DType::kFP32, {b, sq, h});
  hopattn::AttentionOptions opts;
  opts.causal = true;
  try {
    hopattn::attention_fwd(args, opts);
  } catch (const hopattn::Error& e) {
    std::printf("hopattn error: %s\n", e.what());
    return 1;
  }
  // Causal, bottom-right: query 0 sees keys 0..1, query 1 sees keys 0..2; outputs are convex
  // combinations of v rows, so they lie in v's range.
  for (float x : out) {
    if (!std::isfinite(x) || x < 0.f || x > float(v.size())) return 1;
  }
  std::printf("consumer: out[0] = %.4f, lse[0] = %.4f\n", out[0], lse[0]);

  // A serving step through BatchAttention (made once, planned per step, run per layer): a decode
  // over 3 cached tokens and a 2-token prefill chunk over 2, pages of 2 tokens. On CUDA the
  // same calls take device tensors, and plan(..., workspace, stream) uploads the plan.
  const int dh = 64;  // the batch family's head dims: 64, 128, 256
  hopattn::BatchAttentionConfig config;
  config.num_qo_heads = 2;
  config.num_kv_heads = 1;
  config.head_dim = dh;
  config.page_size = 2;
  config.max_batch = 2;
  config.max_tokens = 3;
  const int32_t cu_seqlens_q[] = {0, 1, 3}, kv_lens[] = {3, 2};
  std::vector<float> k_cache(4 * 2 * 1 * dh), v_cache(k_cache.size());  // [pages, 2, 1, dh]
  for (size_t i = 0; i < k_cache.size(); ++i) k_cache[i] = 0.02f * float(i % 7);
  for (size_t i = 0; i < v_cache.size(); ++i) v_cache[i] = float(i % 5);
  std::vector<float> bq(3 * 2 * dh, 0.02f), bout(bq.size()), blse(3 * 2);
  std::vector<int32_t> page_table = {2, 0, 3, 1};  // [2 requests, 2 pages]
  hopattn::BatchArgs step;
  step.q = TensorView(bq.data(), DType::kFP32, {3, 2, dh});
  step.k_cache = TensorView(k_cache.data(), DType::kFP32, {4, 2, 1, dh});
  step.v_cache = TensorView(v_cache.data(), DType::kFP32, {4, 2, 1, dh});
  step.cu_seqlens_q = TensorView(const_cast<int32_t*>(cu_seqlens_q), DType::kInt32, {3});
  step.kv_lens = TensorView(const_cast<int32_t*>(kv_lens), DType::kInt32, {2});
  step.page_table = TensorView(page_table.data(), DType::kInt32, {2, 2});
  step.out = TensorView(bout.data(), DType::kFP32, {3, 2, dh});
  step.lse = TensorView(blse.data(), DType::kFP32, {3, 2});
  int items = 0;
  try {
    hopattn::BatchAttention batch(config);
    batch.plan(cu_seqlens_q, kv_lens, 2);
    batch.run(step);
    items = batch.planned().num_items;
  } catch (const hopattn::Error& e) {
    std::printf("hopattn error: %s\n", e.what());
    return 1;
  }
  for (float x : bout) {
    if (!std::isfinite(x) || x < 0.f || x > 4.f) return 1;  // convex combinations of v's values
  }
  std::printf("consumer: batch out[0] = %.4f over %d work items\n", bout[0], items);
  return 0;
}
