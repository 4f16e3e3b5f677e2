// CPU reference of DeepSeek multi-head latent attention over a paged latent cache: every query
// head attends to the one shared latent row per token, logit = scale * (q_nope . ckv + q_pe . kpe),
// and the value is the latent row itself (ckv), all of it times kv_scale (an fp8 cache's
// dequantization). Bottom-right causal per request.
#include <algorithm>
#include <cstdint>
#include <thread>
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

PageTable nhd(PageTable pages) {
  pages.layout = KVLayout::kNHD;
  return pages;
}

struct MlaProblem {
  const MlaArgs& args;
  const MlaOptions& opts;
  KVLocator ckv, kpe;
  int64_t latent_dim, rope_dim, num_heads;
  double scale;

  MlaProblem(const MlaArgs& a, const MlaOptions& o)
      : args(a),
        opts(o),
        ckv(KVLocator::paged(as_one_head_pool(a.ckv), nhd(a.pages))),
        kpe(KVLocator::paged(as_one_head_pool(a.kpe), nhd(a.pages))),
        latent_dim(a.q_nope.size(2)),
        rope_dim(a.q_pe.size(2)),
        num_heads(a.q_nope.size(1)),
        scale(default_scale(o.scale, static_cast<int>(a.q_nope.size(2) + a.q_pe.size(2)))) {}

  // Request b: its latent rows are read once and shared by all of its queries and heads. The
  // (query, head) rows run on the host's threads when `parallel_rows`, else serially.
  void run_request(int64_t b, bool parallel_rows) const {
    const int64_t q_begin = index_at(args.cu_seqlens_q, b);
    const int64_t q_len = index_at(args.cu_seqlens_q, b + 1) - q_begin;
    const int64_t kv_len = index_at(args.pages.kv_lens, b);
    if (q_len <= 0) return;
    const double kv_scale = args.kv_scale;  // an fp8 cache's dequantization (1 for 16-bit)
    std::vector<double> lat(static_cast<size_t>(kv_len * latent_dim));
    std::vector<double> rope(static_cast<size_t>(kv_len * rope_dim));
    for (int64_t j = 0; j < kv_len; ++j) {
      for (int64_t d = 0; d < latent_dim; ++d) {
        lat[j * latent_dim + d] = load_element(ckv.tensor(), ckv.offset(b, j, 0, d)) * kv_scale;
      }
      for (int64_t d = 0; d < rope_dim; ++d) {
        rope[j * rope_dim + d] = load_element(kpe.tensor(), kpe.offset(b, j, 0, d)) * kv_scale;
      }
    }
    auto row = [&](int64_t item) {
      run_row(q_begin, item / num_heads, item % num_heads, q_len, kv_len, lat, rope);
    };
    if (parallel_rows) {
      parallel_for(q_len * num_heads, row);
    } else {
      for (int64_t item = 0; item < q_len * num_heads; ++item) row(item);
    }
  }

  void run_row(int64_t q_begin, int64_t i, int64_t h, int64_t q_len, int64_t kv_len,
               const std::vector<double>& lat, const std::vector<double>& rope) const {
    const TensorView& qn = args.q_nope;
    const TensorView& qp = args.q_pe;
    const TensorView& out = args.out;
    const int64_t t = q_begin + i;
    std::vector<double> q_lat(static_cast<size_t>(latent_dim));
    std::vector<double> q_rope(static_cast<size_t>(rope_dim));
    for (int64_t d = 0; d < latent_dim; ++d) {
      q_lat[d] = load_element(qn, t * qn.stride(0) + h * qn.stride(1) + d * qn.stride(2));
    }
    for (int64_t d = 0; d < rope_dim; ++d) {
      q_rope[d] = load_element(qp, t * qp.stride(0) + h * qp.stride(1) + d * qp.stride(2));
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
      // Masked: the value row is not touched. A visible key counts even at zero weight, so NaN
      // in its latent row still reaches out.
      if (!key_visible(i, j, q_len, kv_len, opts.causal, Window{})) continue;
      for (int64_t d = 0; d < latent_dim; ++d) o[d] += p[j] * lat[j * latent_dim + d];
    }
    for (int64_t d = 0; d < latent_dim; ++d) {
      store_element(out, t * out.stride(0) + h * out.stride(1) + d * out.stride(2), o[d]);
    }
    if (args.lse.defined()) {
      store_element(args.lse, t * args.lse.stride(0) + h * args.lse.stride(1), lse);
    }
  }
};

}  // namespace

void mla(const MlaArgs& args, const MlaOptions& opts) {
  const MlaProblem problem(args, opts);
  const int64_t batch = args.cu_seqlens_q.size(0) - 1;
  // Many requests (decode batches): one thread per request at a time. Few requests (long
  // prefills): the threads share each request's (query, head) rows instead.
  const int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (batch >= threads) {
    parallel_for(batch, [&](int64_t b) { problem.run_request(b, /*parallel_rows=*/false); });
  } else {
    for (int64_t b = 0; b < batch; ++b) problem.run_request(b, /*parallel_rows=*/true);
  }
}

}  // namespace hopattn::reference
