#include "reference/attention_core.hpp"

#include <algorithm>
#include <cmath>

#include "common/element_access.hpp"
#include "reference/attend.hpp"

namespace hopattn::reference {
namespace {

double dot(const double* a, const double* b, int64_t n) {
  double s = 0.0;
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// Capped logits of row i over its visible keys into `logits` (index j - range.lo); `k` holds
// keys from key_lo on.
void row_logits(const HeadShape& shape, const LogitParams& params, const double* q_row,
                const double* k, int64_t key_lo, KeyRange range, std::vector<double>& logits) {
  logits.resize(range.size());
  for (int64_t j = range.lo; j < range.hi; ++j) {
    logits[j - range.lo] = apply_softcap(
        params.scale * dot(q_row, k + (j - key_lo) * shape.dqk, shape.dqk), params.softcap);
  }
}

}  // namespace

KeyRange visible_keys(int64_t i, const HeadShape& shape, const LogitParams& params) {
  const int64_t diag = i + shape.kv_len - shape.q_len;  // bottom-right alignment
  KeyRange r{0, shape.kv_len};
  if (params.causal) r.hi = std::min(r.hi, diag + 1);
  if (params.window.left >= 0) r.lo = std::max(r.lo, diag - params.window.left);
  if (params.window.right >= 0) r.hi = std::min(r.hi, diag + params.window.right + 1);
  return r;
}

void head_forward(const HeadShape& shape, const LogitParams& params, const double* q,
                  const double* k, const double* v, const double* sink, double* out, double* lse) {
  head_forward_block(shape, params, {0, shape.q_len, 0, shape.kv_len}, q, k, v, sink, out, lse);
}

void head_forward_block(const HeadShape& shape, const LogitParams& params, const HeadBlock& block,
                        const double* q, const double* k, const double* v, const double* sink,
                        double* out, double* lse) {
  std::vector<double> p;
  for (int64_t i = block.row_lo; i < block.row_hi; ++i) {
    KeyRange range = visible_keys(i, shape, params);
    range.lo = std::max(range.lo, block.key_lo);
    range.hi = std::min(range.hi, block.key_hi);
    const int64_t r = i - block.row_lo;
    row_logits(shape, params, q + r * shape.dqk, k, block.key_lo, range, p);
    lse[r] = softmax_row(p.data(), range.size(), sink);
    double* o = out + r * shape.dv;
    std::fill(o, o + shape.dv, 0.0);
    for (int64_t j = range.lo; j < range.hi; ++j) {
      const double pj = p[j - range.lo];
      const double* vj = v + (j - block.key_lo) * shape.dv;
      for (int64_t d = 0; d < shape.dv; ++d) o[d] += pj * vj[d];
    }
  }
}

void head_backward(const HeadShape& shape, const LogitParams& params, const double* q,
                   const double* k, const double* v, const double* sink, const double* dout,
                   const double* saved_out, const double* saved_lse, double* dq, double* dk,
                   double* dv, double* dsink) {
  std::vector<double> s, p;
  for (int64_t i = 0; i < shape.q_len; ++i) {
    const KeyRange range = visible_keys(i, shape, params);
    const double* qi = q + i * shape.dqk;
    const double* doi = dout + i * shape.dv;
    double* dqi = dq + i * shape.dqk;
    std::fill(dqi, dqi + shape.dqk, 0.0);
    const double lse = saved_lse[i];
    if (lse == kNegInf) continue;  // the forward saw nothing here: the row has no inputs
    row_logits(shape, params, qi, k, 0, range, s);
    p.resize(s.size());
    for (size_t j = 0; j < s.size(); ++j) p[j] = std::exp(s[j] - lse);
    const double delta = dot(doi, saved_out + i * shape.dv, shape.dv);

    for (int64_t j = range.lo; j < range.hi; ++j) {
      const double pj = p[j - range.lo];
      const double* vj = v + j * shape.dv;
      double* dvj = dv + j * shape.dv;
      for (int64_t d = 0; d < shape.dv; ++d) dvj[d] += pj * doi[d];
      // dL/ds_j = p_j (dO_i . v_j - D_i); the softcap's derivative is 1 - tanh^2, and
      // tanh = s / softcap on the capped logit.
      double ds = pj * (dot(doi, vj, shape.dv) - delta);
      if (params.softcap > 0) {
        const double t = s[j - range.lo] / params.softcap;
        ds *= 1.0 - t * t;
      }
      const double dx = params.scale * ds;
      const double* kj = k + j * shape.dqk;
      double* dkj = dk + j * shape.dqk;
      for (int64_t d = 0; d < shape.dqk; ++d) {
        dqi[d] += dx * kj[d];
        dkj[d] += dx * qi[d];
      }
    }
    // The sink only enlarges the denominator: dO/dsink = -p_sink * O, so dL/dsink = -p_sink D.
    if (sink && dsink) *dsink -= std::exp(*sink - lse) * delta;
  }
}

ProblemLayout::ProblemLayout(const FwdArgs& args)
    : dense_q_(args.q.rank() == 4),
      dense_kv_(!args.pages.defined() && args.k.rank() == 4),
      cu_seqlens_k_(args.cu_seqlens_k),
      pages_(args.pages),
      hq_(args.q.size(-2)),
      dqk_(args.q.size(-1)),
      dv_(args.v.size(-1)) {
  const int64_t batch = dense_q_ ? args.q.size(0) : args.cu_seqlens_q.size(0) - 1;
  q_len_.resize(batch);
  kv_len_.resize(batch);
  q_start_.resize(batch);
  for (int64_t b = 0; b < batch; ++b) {
    if (dense_q_) {
      q_start_[b] = 0;
      q_len_[b] = args.q.size(1);
    } else {
      q_start_[b] = index_at(args.cu_seqlens_q, b);
      q_len_[b] = index_at(args.cu_seqlens_q, b + 1) - q_start_[b];
    }
    if (pages_.defined()) {
      kv_len_[b] = index_at(pages_.kv_lens, b);
    } else if (dense_kv_) {
      kv_len_[b] = args.k.size(1);
    } else {
      kv_len_[b] = index_at(cu_seqlens_k_, b + 1) - index_at(cu_seqlens_k_, b);
    }
  }
  hkv_ = kv_locator(args.k).num_heads();
}

LogitParams ProblemLayout::logit_params(const AttentionOptions& opts) const {
  return {default_scale(opts.scale, static_cast<int>(dqk_)), double(opts.softcap), opts.causal,
          opts.window};
}

double ProblemLayout::work() const {
  double w = 0;
  for (int64_t b = 0; b < batch(); ++b) w += double(q_len_[b]) * double(kv_len_[b]);
  return w * double(hq_) * double(dqk_ + dv_);
}

std::vector<double> ProblemLayout::load_sinks(const TensorView& sinks) const {
  std::vector<double> out;
  if (sinks.defined()) {
    for (int64_t h = 0; h < hq_; ++h) out.push_back(load_element(sinks, h * sinks.stride(0)));
  }
  return out;
}

KVLocator ProblemLayout::kv_locator(const TensorView& t) const {
  if (pages_.defined()) return KVLocator::paged(t, pages_);
  if (dense_kv_) return KVLocator::dense(t);
  return KVLocator::varlen(t, cu_seqlens_k_);
}

int64_t ProblemLayout::q_offset(const TensorView& t, int64_t b, int64_t i, int64_t h,
                                int64_t d) const {
  if (dense_q_) return b * t.stride(0) + i * t.stride(1) + h * t.stride(2) + d * t.stride(3);
  return (q_start_[b] + i) * t.stride(0) + h * t.stride(1) + d * t.stride(2);
}

int64_t ProblemLayout::lse_offset(const TensorView& t, int64_t b, int64_t i, int64_t h) const {
  if (dense_q_) return b * t.stride(0) + i * t.stride(1) + h * t.stride(2);
  return (q_start_[b] + i) * t.stride(0) + h * t.stride(1);
}

void ProblemLayout::gather_q(const TensorView& t, int64_t b, int64_t h,
                             std::vector<double>& dst) const {
  const int64_t dim = t.size(-1);
  dst.resize(q_len_[b] * dim);
  for (int64_t i = 0; i < q_len_[b]; ++i) {
    for (int64_t d = 0; d < dim; ++d) dst[i * dim + d] = load_element(t, q_offset(t, b, i, h, d));
  }
}

void ProblemLayout::gather_kv(const KVLocator& loc, int64_t b, int64_t h,
                              std::vector<double>& dst) const {
  const int64_t dim = loc.head_dim();
  dst.resize(kv_len_[b] * dim);
  for (int64_t t = 0; t < kv_len_[b]; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      dst[t * dim + d] = load_element(loc.tensor(), loc.offset(b, t, h, d));
    }
  }
}

}  // namespace hopattn::reference
