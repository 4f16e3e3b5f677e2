// CPU reference of DeepSeek multi-head latent attention over a paged latent cache: every query
// head attends to the one shared latent row per token, logit = scale * (q_nope . ckv + q_pe . kpe),
// and the value is the latent row itself (ckv). Bottom-right causal per request.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/element_access.hpp"
#include "reference/attend.hpp"
#include "reference/kv_locator.hpp"
#include "reference/parallel_for.hpp"
#include "reference/reference.hpp"

namespace hopattn::reference {
namespace {

// [P, page_size, D] seen as an NHD pool with one head, [P, page_size, 1, D], so that the paged
// addressing (block table or CSR) is the one every other family uses.
TensorView as_one_head_pool(const TensorView& t) {
  const int64_t shape[4] = {t.size(0), t.size(1), 1, t.size(2)};
  const int64_t strides[4] = {t.stride(0), t.stride(1), 0, t.stride(2)};
  return TensorView(t.data(), t.dtype(), 4, shape, strides, t.device());
}

}  // namespace

void mla(const MlaArgs& args, const MlaOptions& opts) {
  PageTable pages = args.pages;
  pages.layout = KVLayout::kNHD;
  const KVLocator ckv = KVLocator::paged(as_one_head_pool(args.ckv), pages);
  const KVLocator kpe = KVLocator::paged(as_one_head_pool(args.kpe), pages);
  const int64_t latent_dim = args.q_nope.size(2);
  const int64_t rope_dim = args.q_pe.size(2);
  const int64_t num_heads = args.q_nope.size(1);
  const double scale = default_scale(opts.scale, static_cast<int>(latent_dim + rope_dim));
  const int64_t batch = args.cu_seqlens_q.size(0) - 1;
  const TensorView& qn = args.q_nope;
  const TensorView& qp = args.q_pe;
  const TensorView& out = args.out;

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_begin = index_at(args.cu_seqlens_q, b);
    const int64_t q_len = index_at(args.cu_seqlens_q, b + 1) - q_begin;
    const int64_t kv_len = index_at(pages.kv_lens, b);
    if (q_len <= 0) continue;

    // The request's latent rows, read once and shared by all of its queries and heads.
    std::vector<double> lat(static_cast<size_t>(kv_len * latent_dim));
    std::vector<double> rope(static_cast<size_t>(kv_len * rope_dim));
    parallel_for(kv_len, [&](int64_t j) {
      for (int64_t d = 0; d < latent_dim; ++d) {
        lat[j * latent_dim + d] = load_element(ckv.tensor(), ckv.offset(b, j, 0, d));
      }
      for (int64_t d = 0; d < rope_dim; ++d) {
        rope[j * rope_dim + d] = load_element(kpe.tensor(), kpe.offset(b, j, 0, d));
      }
    });

    parallel_for(q_len * num_heads, [&](int64_t item) {
      const int64_t i = item / num_heads;
      const int64_t h = item % num_heads;
      const int64_t row = q_begin + i;
      std::vector<double> q_lat(static_cast<size_t>(latent_dim));
      std::vector<double> q_rope(static_cast<size_t>(rope_dim));
      for (int64_t d = 0; d < latent_dim; ++d) {
        q_lat[d] = load_element(qn, row * qn.stride(0) + h * qn.stride(1) + d * qn.stride(2));
      }
      for (int64_t d = 0; d < rope_dim; ++d) {
        q_rope[d] = load_element(qp, row * qp.stride(0) + h * qp.stride(1) + d * qp.stride(2));
      }
      std::vector<double> p(static_cast<size_t>(kv_len));
      for (int64_t j = 0; j < kv_len; ++j) {
        if (!key_visible(i, j, q_len, kv_len, opts.causal, Window{})) {
          p[j] = kNegInf;
          continue;
        }
        double dot = 0.0;
        for (int64_t d = 0; d < latent_dim; ++d) dot += q_lat[d] * lat[j * latent_dim + d];
        for (int64_t d = 0; d < rope_dim; ++d) dot += q_rope[d] * rope[j * rope_dim + d];
        p[j] = scale * dot;
      }
      const double lse = softmax_row(p.data(), kv_len, nullptr);
      std::vector<double> o(static_cast<size_t>(latent_dim), 0.0);
      for (int64_t j = 0; j < kv_len; ++j) {
        if (p[j] == 0.0) continue;
        for (int64_t d = 0; d < latent_dim; ++d) o[d] += p[j] * lat[j * latent_dim + d];
      }
      for (int64_t d = 0; d < latent_dim; ++d) {
        store_element(out, row * out.stride(0) + h * out.stride(1) + d * out.stride(2), o[d]);
      }
      if (args.lse.defined()) {
        store_element(args.lse, row * args.lse.stride(0) + h * args.lse.stride(1), lse);
      }
    });
  }
}

}  // namespace hopattn::reference
