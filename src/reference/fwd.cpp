// CPU reference of the fwd family: every (request, q head) problem is gathered into double
// arrays and handed to the core (attention_core.hpp); out and lse are rounded once, on store.
// Varlen rows past cu_seqlens_q[B] (padding the validator allows) belong to no request and are
// left untouched.
#include <vector>

#include "common/element_access.hpp"
#include "reference/attention_core.hpp"
#include "reference/reference.hpp"

namespace hopattn::reference {

void attention_fwd(const FwdArgs& args, const AttentionOptions& opts) {
  const ProblemLayout layout(args);
  const LogitParams params = layout.logit_params(opts);
  const KVLocator k_loc = layout.kv_locator(args.k);
  const KVLocator v_loc = layout.kv_locator(args.v);
  const int64_t hkv = layout.num_kv_heads();
  const int64_t group = layout.num_q_heads() / hkv;
  const int64_t dv = layout.dv();

  const std::vector<double> sinks = layout.load_sinks(args.sinks);

  // One task per (request, kv head): its keys and values are gathered once for the whole group
  // of q heads that share them. Tasks write disjoint rows of out and lse.
  run_tasks(layout.batch() * hkv, layout.work(), [&](int64_t task) {
    const int64_t b = task / hkv;
    const int64_t kv_head = task % hkv;
    const HeadShape shape = layout.head_shape(b);
    if (shape.q_len == 0) return;
    std::vector<double> k, v, q, out(shape.q_len * dv), lse(shape.q_len);
    layout.gather_kv(k_loc, b, kv_head, k);
    layout.gather_kv(v_loc, b, kv_head, v);
    for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
      layout.gather_q(args.q, b, h, q);
      head_forward(shape, params, q.data(), k.data(), v.data(), sinks.empty() ? nullptr : &sinks[h],
                   out.data(), lse.data());
      for (int64_t i = 0; i < shape.q_len; ++i) {
        for (int64_t d = 0; d < dv; ++d) {
          store_element(args.out, layout.q_offset(args.out, b, i, h, d), out[i * dv + d]);
        }
        if (args.lse.defined())
          store_element(args.lse, layout.lse_offset(args.lse, b, i, h), lse[i]);
      }
    }
  });
}

}  // namespace hopattn::reference
