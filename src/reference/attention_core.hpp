// The double-precision core of the fwd and bwd references, and the addressing that maps FwdArgs
// (dense, varlen or paged) onto it.
//
// The core works on one (request, q head) problem held in plain row-major double arrays, so
// tests can finite-difference it without any storage rounding; fwd.cpp and bwd.cpp only gather
// inputs into such arrays, call the core, and scatter results back into the caller's tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "hopattn/options.hpp"
#include "reference/kv_locator.hpp"
#include "reference/parallel_for.hpp"

namespace hopattn::reference {

// Logit transform and mask shared by every row of a problem.
struct LogitParams {
  double scale = 1.0;
  double softcap = 0.0;  // > 0: s = softcap * tanh(scale * q.k / softcap)
  bool causal = false;
  Window window{};
};

// Sizes of one (request, q head) problem.
struct HeadShape {
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t dqk = 0;
  int64_t dv = 0;
};

// Keys [lo, hi) visible to query row i; empty when lo >= hi. The same rule as key_visible() in
// attend.hpp, expressed as an interval so the loops never touch (never read) a masked key.
struct KeyRange {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t size() const { return hi > lo ? hi - lo : 0; }
};
KeyRange visible_keys(int64_t i, const HeadShape& shape, const LogitParams& params);

// Forward of one head: q [q_len, dqk], k [kv_len, dqk], v [kv_len, dv] row-major; sink may be
// null. Writes out [q_len, dv] and lse [q_len] (natural log of the whole softmax denominator,
// sink included; -inf and a zero row when nothing is visible and there is no sink).
void head_forward(const HeadShape& shape, const LogitParams& params, const double* q,
                  const double* k, const double* v, const double* sink, double* out, double* lse);

// A block of one head's problem: query rows [row_lo, row_hi) against keys [key_lo, key_hi) only.
// Its result is the partial state (o, lse) of those rows over the keys of the block that each
// row sees (the mask still follows the whole problem's q_len and kv_len): what one work item of a
// split-KV schedule computes, to be combined with the other blocks' by the merge reference.
struct HeadBlock {
  int64_t row_lo = 0, row_hi = 0;
  int64_t key_lo = 0, key_hi = 0;
};

// head_forward restricted to `block`: q [rows, dqk], k [keys, dqk], v [keys, dv] hold only the
// block's rows and keys (row row_lo, key key_lo first); out [rows, dv], lse [rows]. The sink, when
// given, joins this block's denominator (give it to exactly one block of a row).
void head_forward_block(const HeadShape& shape, const LogitParams& params, const HeadBlock& block,
                        const double* q, const double* k, const double* v, const double* sink,
                        double* out, double* lse);

// Backward of one head for the loss whose gradient with respect to `out` is dout [q_len, dv],
// from the forward's saved statistics, as the GPU kernels compute it: p_j = exp(s_j - lse_i)
// with the saved lse [q_len] and D_i = dO_i . out_i with the saved out [q_len, dv]. For the
// forward's own out and lse this is the gradient of the forward above (up to their storage
// rounding); for the merged out and lse of a split forward (context parallel, split-KV) it is
// this key block's share of the gradients. dq [q_len, dqk] is overwritten; dk [kv_len, dqk],
// dv [kv_len, dv] and *dsink (when both sink and dsink are non-null) are accumulated into (+=),
// which is what GQA groups and shared pages need. A row with lse = -inf has no gradient.
void head_backward(const HeadShape& shape, const LogitParams& params, const double* q,
                   const double* k, const double* v, const double* sink, const double* dout,
                   const double* saved_out, const double* saved_lse, double* dq, double* dk,
                   double* dv, double* dsink);

// Runs fn(task) for every task in [0, n): on the host's threads (parallel_for) when `total_work`
// (multiply-adds, roughly) pays for starting them, else serially on the calling thread.
inline constexpr double kParallelWorkThreshold = 1 << 20;
template <typename Fn>
void run_tasks(int64_t n, double total_work, const Fn& fn) {
  if (total_work >= kParallelWorkThreshold) return parallel_for(n, fn);
  for (int64_t t = 0; t < n; ++t) fn(t);
}

// How FwdArgs lay out a batch: dense [B, S, H, D], varlen [total, H, D] + cu_seqlens, or paged KV
// (pages.defined(); q dense or varlen). Index tensors are read once here, on the host.
class ProblemLayout {
 public:
  explicit ProblemLayout(const FwdArgs& args);

  int64_t batch() const { return static_cast<int64_t>(q_len_.size()); }
  int64_t q_len(int64_t b) const { return q_len_[b]; }
  int64_t kv_len(int64_t b) const { return kv_len_[b]; }
  int64_t num_q_heads() const { return hq_; }
  int64_t num_kv_heads() const { return hkv_; }
  int64_t dqk() const { return dqk_; }
  int64_t dv() const { return dv_; }
  HeadShape head_shape(int64_t b) const { return {q_len_[b], kv_len_[b], dqk_, dv_}; }
  LogitParams logit_params(const AttentionOptions& opts) const;
  // Multiply-adds of the forward over the whole batch (for parallel_for).
  double work() const;
  // The attention sinks, one per q head (empty when `sinks` is undefined).
  std::vector<double> load_sinks(const TensorView& sinks) const;

  // Addressing of a key-side tensor (k, v, dk, dv): they share the mode and the page table.
  KVLocator kv_locator(const TensorView& t) const;
  // Element offset of (request b, row i, head h, feature d) in a query-side tensor
  // (q, out, dout, dq), and of (b, i, h) in lse.
  int64_t q_offset(const TensorView& t, int64_t b, int64_t i, int64_t h, int64_t d) const;
  int64_t lse_offset(const TensorView& t, int64_t b, int64_t i, int64_t h) const;

  // Copies the rows of request b, head h of a query-side tensor into dst [q_len, dim].
  void gather_q(const TensorView& t, int64_t b, int64_t h, std::vector<double>& dst) const;
  // Copies the kv_len rows of request b, kv head h into dst [kv_len, dim]; slots past kv_len are
  // never read.
  void gather_kv(const KVLocator& loc, int64_t b, int64_t h, std::vector<double>& dst) const;

 private:
  bool dense_q_ = true;
  bool dense_kv_ = true;
  TensorView cu_seqlens_k_;
  PageTable pages_;
  int64_t hq_ = 0, hkv_ = 0, dqk_ = 0, dv_ = 0;
  std::vector<int64_t> q_len_, kv_len_, q_start_;
};

}  // namespace hopattn::reference
