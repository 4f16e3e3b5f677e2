// CPU reference of the batch family, run through the step's plan as the persistent kernel runs
// it: CTA by CTA, every work item (one KV head's row tile against a range of keys) goes through
// the fwd core on exactly its rows and keys (head_forward_block) and writes its rows to out / lse,
// or, when its keys are split, its partial state to the partial buffers; then every merge record
// combines its partial blocks with the merge reference (merge_states_n) into out / lse. The math
// is the references' own; what this adds is the plan's coverage: a row no item writes, or keys two
// items both count, would show in the result.
#include <cstring>
#include <vector>

#include "common/element_access.hpp"
#include "hopattn/error.hpp"
#include "plan/batch_plan_layout.hpp"
#include "reference/attend.hpp"
#include "reference/attention_core.hpp"
#include "reference/kv_locator.hpp"
#include "reference/reference.hpp"

namespace hopattn::reference {
namespace {

using plan::BatchMergeRecord;
using plan::BatchPlanHeader;
using plan::BatchWorkItem;

// The plan's records, read from its bytes (memcpy: the buffer holds bytes, not objects).
class PlanReader {
 public:
  explicit PlanReader(const void* plan) : base_(static_cast<const unsigned char*>(plan)) {
    std::memcpy(&h_, base_, sizeof(h_));
    if (h_.magic != plan::kBatchPlanMagic || h_.version != plan::kBatchPlanVersion) {
      throw Error(ErrorKind::kRuntime,
                  "hopattn.BatchAttention.run: plan: expected a batch plan "
                  "(magic HBP1, version 2), got other bytes");
    }
  }
  const BatchPlanHeader& header() const { return h_; }
  // Group 0's CTA l's first stored item (batch_plan_layout.hpp: every group runs group 0's lists).
  int32_t cta_offset(int l) const { return read<int32_t>(h_.cta_offsets_offset, l); }
  BatchWorkItem item(int i) const { return read<BatchWorkItem>(h_.items_offset, i); }
  BatchMergeRecord merge(int i) const { return read<BatchMergeRecord>(h_.merges_offset, i); }

 private:
  template <class T>
  T read(size_t offset, int i) const {
    T t;
    std::memcpy(&t, base_ + offset + sizeof(T) * static_cast<size_t>(i), sizeof(T));
    return t;
  }
  const unsigned char* base_;
  BatchPlanHeader h_;
};

class BatchRun {
 public:
  BatchRun(const BatchArgs& a, const BatchAttentionConfig& cfg, const PlanReader& plan,
           float* partial_o, float* partial_lse)
      : a_(a),
        plan_(plan),
        partial_o_(partial_o),
        partial_lse_(partial_lse),
        pages_{a.page_table, {}, {}, a.kv_lens, cfg.kv_layout},
        k_(KVLocator::paged(a.k_cache, pages_)),
        v_(KVLocator::paged(a.v_cache, pages_)),
        group_(cfg.num_qo_heads / cfg.num_kv_heads),
        dqk_(cfg.head_dim),
        dv_(cfg.head_dim_v != 0 ? cfg.head_dim_v : cfg.head_dim),
        params_{default_scale(cfg.scale, cfg.head_dim), double(cfg.softcap), cfg.causal,
                cfg.window} {}

  // Multiply-adds of the whole plan (whether threads pay off).
  double work() const {
    double w = 0;
    for (int i = 0; i < plan_.header().group_items; ++i) {
      const BatchWorkItem it = plan_.item(i);
      w += double(it.row_end - it.row_begin) * double(it.kv_end - it.kv_begin);
    }
    return w * double(plan_.header().num_groups) * double(dqk_ + dv_);
  }

  void run_cta(int cta) const {
    const int group_ctas = plan_.header().group_ctas;
    const int g = cta / group_ctas, l = cta % group_ctas;
    for (int i = plan_.cta_offset(l); i < plan_.cta_offset(l + 1); ++i) {
      run_item(plan::batch_group_item(plan_.item(i), plan_.header(), g));
    }
  }

  void run_merge(const BatchMergeRecord& m) const {
    const int64_t positions = (m.row_end - m.row_begin) / group_;
    const int64_t first_head = int64_t{m.kv_head} * group_;
    const int64_t first_row = m.q_start + m.row_begin / group_;
    // Split s's partial row of (position t, head h of the group) is partial_row +
    // s * partial_stride + t * group + h (batch_plan_layout.hpp): views [T, n, group, Dv].
    const int64_t o_shape[4] = {positions, m.num_splits, group_, dv_};
    const int64_t o_strides[4] = {group_ * dv_, m.partial_stride * dv_, dv_, 1};
    const int64_t lse_strides[3] = {group_, m.partial_stride, 1};
    MergeNArgs merge;
    merge.o =
        TensorView(partial_o_ + int64_t{m.partial_row} * dv_, DType::kFP32, 4, o_shape, o_strides);
    merge.lse = TensorView(partial_lse_ + m.partial_row, DType::kFP32, 3, o_shape, lse_strides);
    const TensorView& out = a_.out;
    const TensorView& lse = a_.lse;
    const int64_t out_shape[3] = {positions, group_, dv_};
    const int64_t out_strides[3] = {out.stride(0), out.stride(1), out.stride(2)};
    const int64_t lse_out_strides[2] = {lse.stride(0), lse.stride(1)};
    merge.out = TensorView(element(out, first_row * out.stride(0) + first_head * out.stride(1)),
                           out.dtype(), 3, out_shape, out_strides);
    merge.lse_out = TensorView(element(lse, first_row * lse.stride(0) + first_head * lse.stride(1)),
                               DType::kFP32, 2, out_shape, lse_out_strides);
    merge_states_n(merge);
  }

 private:
  static void* element(const TensorView& t, int64_t offset) {
    return static_cast<char*>(t.data()) + offset * dtype_size(t.dtype());
  }

  // The item's keys [kv_begin, kv_end) of its request and KV head, dequantized, row-major.
  void gather_keys(const BatchWorkItem& it, const KVLocator& loc, const KVScale& scale, int64_t dim,
                   std::vector<double>& dst) const {
    const double s = kv_scale(scale, it.kv_head);
    dst.resize(static_cast<size_t>((it.kv_end - it.kv_begin) * dim));
    for (int64_t t = it.kv_begin; t < it.kv_end; ++t) {
      for (int64_t d = 0; d < dim; ++d) {
        dst[(t - it.kv_begin) * dim + d] =
            load_element(loc.tensor(), loc.offset(it.request, t, it.kv_head, d)) * s;
      }
    }
  }

  void run_item(const BatchWorkItem& it) const {
    std::vector<double> k, v;
    gather_keys(it, k_, a_.k_scale, dqk_, k);
    gather_keys(it, v_, a_.v_scale, dv_, v);
    // Rows are whole positions: packed row r is position r / group, head kv_head * group +
    // r % group (batch_tiles.hpp), so each head of the group sees positions p0 .. p1 - 1.
    const int64_t p0 = it.row_begin / group_, p1 = it.row_end / group_, n = p1 - p0;
    const HeadShape shape{it.q_len, it.kv_len, dqk_, dv_};
    const HeadBlock block{p0, p1, it.kv_begin, it.kv_end};
    // The sink joins one block of each row: the unsplit item's, or the first KV chunk's.
    const bool split = it.merge >= 0;
    const bool sink_here =
        a_.sinks.defined() && (!split || plan_.merge(it.merge).partial_row == it.partial_row);
    std::vector<double> q(static_cast<size_t>(n * dqk_)), o(static_cast<size_t>(n * dv_)), lse(n);
    const TensorView& qt = a_.q;
    for (int64_t g = 0; g < group_; ++g) {
      const int64_t h = int64_t{it.kv_head} * group_ + g;
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t d = 0; d < dqk_; ++d) {
          q[(p - p0) * dqk_ + d] = load_element(
              qt, (it.q_start + p) * qt.stride(0) + h * qt.stride(1) + d * qt.stride(2));
        }
      }
      const double sink = sink_here ? load_element(a_.sinks, h * a_.sinks.stride(0)) : 0.0;
      head_forward_block(shape, params_, block, q.data(), k.data(), v.data(),
                         sink_here ? &sink : nullptr, o.data(), lse.data());
      for (int64_t r = 0; r < n; ++r) {
        if (split) {
          store_partial(it, r, g, o, lse);
        } else {
          store(it, r, h, o, lse);
        }
      }
    }
  }

  void store(const BatchWorkItem& it, int64_t r, int64_t h, const std::vector<double>& o,
             const std::vector<double>& lse) const {
    const TensorView& out = a_.out;
    const int64_t row = it.q_start + it.row_begin / group_ + r;
    for (int64_t d = 0; d < dv_; ++d) {
      store_element(out, row * out.stride(0) + h * out.stride(1) + d * out.stride(2),
                    o[r * dv_ + d]);
    }
    store_element(a_.lse, row * a_.lse.stride(0) + h * a_.lse.stride(1), lse[r]);
  }

  // Packed row row_begin + r * group + g of the item lands at partial row partial_row + r * group
  // + g (batch_plan_layout.hpp: row x at partial_row + x - row_begin).
  void store_partial(const BatchWorkItem& it, int64_t r, int64_t g, const std::vector<double>& o,
                     const std::vector<double>& lse) const {
    const int64_t row = it.partial_row + r * group_ + g;
    for (int64_t d = 0; d < dv_; ++d) {
      partial_o_[row * dv_ + d] = static_cast<float>(o[r * dv_ + d]);
    }
    partial_lse_[row] = static_cast<float>(lse[r]);
  }

  const BatchArgs& a_;
  const PlanReader& plan_;
  float* partial_o_;
  float* partial_lse_;
  PageTable pages_;
  KVLocator k_, v_;
  int64_t group_, dqk_, dv_;
  LogitParams params_;
};

}  // namespace

void batch(const BatchArgs& args, const BatchAttentionConfig& config, const void* plan,
           float* partial_o, float* partial_lse) {
  const PlanReader reader(plan);
  const BatchRun run(args, config, reader, partial_o, partial_lse);
  // CTAs write disjoint rows of out / lse and disjoint partial rows; merges read partials only
  // after every CTA is done, as the kernel's merge waits for the last split.
  run_tasks(reader.header().num_ctas, run.work(), [&](int64_t cta) { run.run_cta(int(cta)); });
  for (int m = 0; m < reader.header().num_merges; ++m) run.run_merge(reader.merge(m));
}

}  // namespace hopattn::reference
