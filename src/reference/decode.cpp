// CPU reference of the decode family: q [B, q_len, Hq, D] against a paged (optionally 8-bit) KV
// cache, with GQA, bottom-right causal or tree masks, windows, sinks, softcap and beam search.
// One work item per (request, KV head): its keys and values are dequantized into double rows
// once and shared by the Hq / Hkv query heads of the group.
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

struct DecodeProblem {
  const DecodeArgs& args;
  const DecodeOptions& opts;
  KVLocator k, v;
  int64_t q_len, num_q_heads, num_kv_heads, head_dim, head_dim_v;
  double scale;

  DecodeProblem(const DecodeArgs& a, const DecodeOptions& o)
      : args(a),
        opts(o),
        k(KVLocator::paged(a.k_cache, a.pages)),
        v(KVLocator::paged(a.v_cache, a.pages)),
        q_len(a.q.size(1)),
        num_q_heads(a.q.size(2)),
        num_kv_heads(k.num_heads()),
        head_dim(a.q.size(3)),
        head_dim_v(v.head_dim()),
        scale(default_scale(o.scale, static_cast<int>(a.q.size(3)))) {}

  // Which query row's page list holds token t of row b.
  //
  // Beam search: the beam_width beams of request r (rows r*W .. r*W+W-1) share their first
  // shared_kv_lens[r] tokens. Those tokens sit on the same physical pages, and the GPU kernel
  // reads them once for all beams, through the FIRST beam's page list. The reference addresses
  // them the same way, so a prefix token of beam w > 0 is read through row r*W's pages whatever
  // beam w's own page list says for that slot; tokens past the prefix use the beam's own pages.
  int64_t row_for_token(int64_t b, int64_t t) const {
    if (!args.shared_kv_lens.defined()) return b;
    const int64_t width = opts.beam_width > 0 ? opts.beam_width : 1;
    const int64_t request = b / width;
    return t < index_at(args.shared_kv_lens, request) ? request * width : b;
  }

  // Whether query i of row b sees key j (0 <= j < kv_len). A tree mask replaces the causal rule
  // inside the draft (the last q_len tokens): the prefix is always visible, draft token t is
  // visible iff tree_mask[b][i][t]. The window applies on top, bottom-right aligned.
  bool visible(int64_t b, int64_t i, int64_t j, int64_t kv_len) const {
    if (!args.tree_mask.defined())
      return key_visible(i, j, q_len, kv_len, opts.causal, opts.window);
    if (!key_visible(i, j, q_len, kv_len, /*causal=*/false, opts.window)) return false;
    const int64_t draft_start = kv_len - q_len;
    if (j < draft_start) return true;
    const TensorView& m = args.tree_mask;
    return load_element(m, b * m.stride(0) + i * m.stride(1) + (j - draft_start) * m.stride(2)) !=
           0.0;
  }

  void run_item(int64_t b, int64_t kv_head) const {
    const int64_t kv_len = index_at(args.pages.kv_lens, b);
    const int64_t group = num_q_heads / num_kv_heads;

    // visibility[i * kv_len + j]; a key no query of the row sees is never read, so pages that
    // only hold such keys (e.g. evicted out of a sliding window) are never dereferenced.
    std::vector<char> vis(static_cast<size_t>(q_len * kv_len));
    std::vector<char> needed(static_cast<size_t>(kv_len), 0);
    for (int64_t i = 0; i < q_len; ++i) {
      for (int64_t j = 0; j < kv_len; ++j) {
        vis[i * kv_len + j] = visible(b, i, j, kv_len);
        needed[j] |= vis[i * kv_len + j];
      }
    }

    const double ks = kv_scale(args.k_scale, kv_head);
    const double vs = kv_scale(args.v_scale, kv_head);
    std::vector<double> keys(static_cast<size_t>(kv_len * head_dim), 0.0);
    std::vector<double> values(static_cast<size_t>(kv_len * head_dim_v), 0.0);
    for (int64_t j = 0; j < kv_len; ++j) {
      if (!needed[j]) continue;
      const int64_t row = row_for_token(b, j);
      for (int64_t d = 0; d < head_dim; ++d) {
        keys[j * head_dim + d] = load_element(k.tensor(), k.offset(row, j, kv_head, d)) * ks;
      }
      for (int64_t d = 0; d < head_dim_v; ++d) {
        values[j * head_dim_v + d] = load_element(v.tensor(), v.offset(row, j, kv_head, d)) * vs;
      }
    }

    const TensorView& q = args.q;
    const TensorView& out = args.out;
    std::vector<double> q_row(static_cast<size_t>(head_dim));
    std::vector<double> p(static_cast<size_t>(kv_len));
    std::vector<double> o(static_cast<size_t>(head_dim_v));
    for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
      double sink = 0.0;
      const bool has_sink = args.sinks.defined();
      if (has_sink) sink = load_element(args.sinks, h * args.sinks.stride(0));
      for (int64_t i = 0; i < q_len; ++i) {
        for (int64_t d = 0; d < head_dim; ++d) {
          q_row[d] = load_element(
              q, b * q.stride(0) + i * q.stride(1) + h * q.stride(2) + d * q.stride(3));
        }
        for (int64_t j = 0; j < kv_len; ++j) {
          if (!vis[i * kv_len + j]) {
            p[j] = kNegInf;
            continue;
          }
          double dot = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) dot += q_row[d] * keys[j * head_dim + d];
          p[j] = apply_softcap(scale * dot, opts.softcap);
        }
        const double lse = softmax_row(p.data(), kv_len, has_sink ? &sink : nullptr);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < kv_len; ++j) {
          // Masked keys: their values are not even touched. A visible key counts even at zero
          // weight (an underflowed exp), so NaN in its value still reaches out (0 * NaN).
          if (!vis[i * kv_len + j]) continue;
          for (int64_t d = 0; d < head_dim_v; ++d) o[d] += p[j] * values[j * head_dim_v + d];
        }
        for (int64_t d = 0; d < head_dim_v; ++d) {
          store_element(
              out, b * out.stride(0) + i * out.stride(1) + h * out.stride(2) + d * out.stride(3),
              o[d]);
        }
        if (args.lse.defined()) {
          const TensorView& l = args.lse;
          store_element(l, b * l.stride(0) + i * l.stride(1) + h * l.stride(2), lse);
        }
      }
    }
  }
};

}  // namespace

void decode(const DecodeArgs& args, const DecodeOptions& opts) {
  // num_splits only changes how the GPU kernel partitions the work, never the result.
  const DecodeProblem problem(args, opts);
  const int64_t batch = args.q.size(0);
  const int64_t kv_heads = problem.num_kv_heads;
  parallel_for(batch * kv_heads,
               [&](int64_t item) { problem.run_item(item / kv_heads, item % kv_heads); });
}

}  // namespace hopattn::reference
