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
  return 0;
}
