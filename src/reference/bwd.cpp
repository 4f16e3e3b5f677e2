// CPU reference of the bwd family.
//
// Choice of inputs: as the GPU kernels, from the forward's saved `out` and `lse` (head_backward):
// probabilities p = exp(s - lse) and D = rowsum(dO * out), in double. With the forward's own out
// and lse that is its gradient up to their storage rounding; with the merged out and lse of a
// split forward each key block's call gives that block's share (hopattn.distributed's ring).
//
// dk and dv are zeroed whole (unused pages, padding rows) and then accumulated, so pages shared
// between requests and GQA groups sum; dq rows past cu_seqlens_q[B] are left untouched, like out.
#include <algorithm>
#include <vector>

#include "common/element_access.hpp"
#include "reference/attention_core.hpp"
#include "reference/reference.hpp"

namespace hopattn::reference {
namespace {

// A double accumulator for every element of an output tensor, addressed by element offset, so
// contributions that land on the same element (GQA groups, pages shared between requests) sum
// in double and the tensor is rounded once, when written.
class OffsetAccumulator {
 public:
  explicit OffsetAccumulator(const TensorView& t) : t_(t) {
    int64_t lo = 0, hi = 0;
    for (int dim = 0; dim < t.rank(); ++dim) {
      const int64_t reach = (t.size(dim) - 1) * t.stride(dim);
      if (t.size(dim) == 0) return;  // empty tensor: nothing to hold
      (reach < 0 ? lo : hi) += reach;
    }
    base_ = lo;
    acc_.assign(hi - lo + 1, 0.0);
  }

  double* at(int64_t offset) { return &acc_[offset - base_]; }

  // Writes every element of the tensor (zero where nothing accumulated).
  void store() const {
    if (acc_.empty()) return;
    std::vector<int64_t> index(t_.rank(), 0);
    for (;;) {
      int64_t off = 0;
      for (int dim = 0; dim < t_.rank(); ++dim) off += index[dim] * t_.stride(dim);
      store_element(t_, off, acc_[off - base_]);
      int dim = t_.rank() - 1;
      while (dim >= 0 && ++index[dim] == t_.size(dim)) index[dim--] = 0;
      if (dim < 0) return;
    }
  }

 private:
  TensorView t_;
  int64_t base_ = 0;
  std::vector<double> acc_;
};

// Gradients of one (request, kv head) task, kept until every task is done so they can be added
// into the shared accumulators in a fixed order (deterministic, and no locking).
struct KvHeadGrads {
  std::vector<double> dk, dv, dsinks;  // dk [kv_len, dqk], dv [kv_len, dv], dsinks [group]
};

}  // namespace

void attention_bwd(const BwdArgs& args, const AttentionOptions& opts) {
  const FwdArgs& fwd = args.fwd;
  const ProblemLayout layout(fwd);
  const LogitParams params = layout.logit_params(opts);
  const KVLocator k_loc = layout.kv_locator(fwd.k);
  const KVLocator v_loc = layout.kv_locator(fwd.v);
  const KVLocator dk_loc = layout.kv_locator(args.dk);
  const KVLocator dv_loc = layout.kv_locator(args.dv);
  const int64_t hkv = layout.num_kv_heads();
  const int64_t group = layout.num_q_heads() / hkv;
  const int64_t dqk = layout.dqk();

  const std::vector<double> sinks = layout.load_sinks(fwd.sinks);

  const int64_t num_tasks = layout.batch() * hkv;
  std::vector<KvHeadGrads> grads(num_tasks);
  run_tasks(num_tasks, 2 * layout.work(), [&](int64_t task) {
    const int64_t b = task / hkv;
    const int64_t kv_head = task % hkv;
    const HeadShape shape = layout.head_shape(b);
    KvHeadGrads& g = grads[task];
    g.dk.assign(shape.kv_len * dqk, 0.0);
    g.dv.assign(shape.kv_len * shape.dv, 0.0);
    g.dsinks.assign(group, 0.0);
    if (shape.q_len == 0) return;
    std::vector<double> k, v, q, dout, out, lse(shape.q_len), dq(shape.q_len * dqk);
    layout.gather_kv(k_loc, b, kv_head, k);
    layout.gather_kv(v_loc, b, kv_head, v);
    for (int64_t r = 0; r < group; ++r) {
      const int64_t h = kv_head * group + r;
      layout.gather_q(fwd.q, b, h, q);
      layout.gather_q(args.dout, b, h, dout);
      layout.gather_q(fwd.out, b, h, out);
      for (int64_t i = 0; i < shape.q_len; ++i) {
        lse[i] = load_element(fwd.lse, layout.lse_offset(fwd.lse, b, i, h));
      }
      head_backward(shape, params, q.data(), k.data(), v.data(),
                    sinks.empty() ? nullptr : &sinks[h], dout.data(), out.data(), lse.data(),
                    dq.data(), g.dk.data(), g.dv.data(), &g.dsinks[r]);
      for (int64_t i = 0; i < shape.q_len; ++i) {
        for (int64_t d = 0; d < dqk; ++d) {
          store_element(args.dq, layout.q_offset(args.dq, b, i, h, d), dq[i * dqk + d]);
        }
      }
    }
  });

  // dk and dv start from zero everywhere (also pages no request reads), then sum in task order.
  OffsetAccumulator dk_acc(args.dk), dv_acc(args.dv);
  std::vector<double> dsinks(layout.num_q_heads(), 0.0);
  for (int64_t task = 0; task < num_tasks; ++task) {
    const int64_t b = task / hkv;
    const int64_t kv_head = task % hkv;
    const HeadShape shape = layout.head_shape(b);
    const KvHeadGrads& g = grads[task];
    for (int64_t t = 0; t < shape.kv_len; ++t) {
      for (int64_t d = 0; d < dqk; ++d) {
        *dk_acc.at(dk_loc.offset(b, t, kv_head, d)) += g.dk[t * dqk + d];
      }
      for (int64_t d = 0; d < shape.dv; ++d) {
        *dv_acc.at(dv_loc.offset(b, t, kv_head, d)) += g.dv[t * shape.dv + d];
      }
    }
    for (int64_t r = 0; r < group; ++r) dsinks[kv_head * group + r] += g.dsinks[r];
  }
  dk_acc.store();
  dv_acc.store();
  if (args.dsinks.defined()) {
    for (int64_t h = 0; h < layout.num_q_heads(); ++h) {
      store_element(args.dsinks, h * args.dsinks.stride(0), dsinks[h]);
    }
  }
}

}  // namespace hopattn::reference
