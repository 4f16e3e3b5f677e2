// The decode-family calls of a mixed step's concurrent form (batch_concurrent.hpp).
#include "api/batch_concurrent.hpp"

#include "kernels/batch/launch.hpp"
#include "plan/decode_plan.hpp"

namespace hopattn::batch_concurrent {
namespace {

// Rows [begin, begin + n) of dimension 0.
TensorView first_dim(const TensorView& t, int64_t begin, int64_t n) {
  int64_t shape[TensorView::kMaxRank], strides[TensorView::kMaxRank];
  for (int d = 0; d < t.rank(); ++d) {
    shape[d] = t.size(d);
    strides[d] = t.stride(d);
  }
  shape[0] = n;
  char* data = static_cast<char*>(t.data()) + begin * t.stride(0) * int64_t(dtype_size(t.dtype()));
  return TensorView(data, t.dtype(), t.rank(), shape, strides, t.device());
}

// Rows [row0, row0 + n * q_len) of a [total_q, ...] tensor as [n, q_len, ...].
TensorView rows_as_requests(const TensorView& t, int64_t row0, int64_t n, int64_t q_len) {
  if (!t.defined()) return t;
  const TensorView rows = first_dim(t, row0, n * q_len);
  int64_t shape[TensorView::kMaxRank], strides[TensorView::kMaxRank];
  shape[0] = n;
  strides[0] = q_len * rows.stride(0);
  for (int d = 0; d < rows.rank(); ++d) {
    shape[d + 1] = rows.size(d);
    strides[d + 1] = rows.stride(d);
  }
  shape[1] = q_len;
  return TensorView(rows.data(), rows.dtype(), rows.rank() + 1, shape, strides, rows.device());
}

}  // namespace

DecodeOptions decode_options(const BatchAttentionConfig& config, const DecodeArgs& decode,
                             DecodeKernel kernel) {
  DecodeOptions o = kernels::batch::mask_options<DecodeOptions>(config);
  o.num_splits = 1;
  if (kernel == DecodeKernel::kNarrow && plan::narrow_kernel_takes(decode, o)) {
    o.kernel = DecodeKernel::kNarrow;
  }
  return o;
}

DecodeArgs decode_args(const BatchArgs& args, const BatchAttentionConfig& config,
                       const int32_t* cu_seqlens_q, const plan::BatchDecodeRun& run) {
  const int64_t n = run.end - run.begin, row0 = cu_seqlens_q[run.begin];
  DecodeArgs a;
  a.q = rows_as_requests(args.q, row0, n, run.q_len);
  a.k_cache = args.k_cache;
  a.v_cache = args.v_cache;
  a.pages.block_table = first_dim(args.page_table, run.begin, n);
  a.pages.kv_lens = first_dim(args.kv_lens, run.begin, n);
  a.pages.layout = config.kv_layout;
  a.k_scale = args.k_scale;
  a.v_scale = args.v_scale;
  a.sinks = args.sinks;
  a.out = rows_as_requests(args.out, row0, n, run.q_len);
  a.lse = rows_as_requests(args.lse, row0, n, run.q_len);
  return a;
}

}  // namespace hopattn::batch_concurrent
