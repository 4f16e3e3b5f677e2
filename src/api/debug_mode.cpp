#include "api/debug_mode.hpp"

#include <atomic>

#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "kernels/common/device_status_host.hpp"

namespace hopattn {
namespace {

std::atomic<bool> g_debug{false};

}  // namespace

void set_debug(bool on) { g_debug.store(on, std::memory_order_relaxed); }
bool debug_enabled() { return g_debug.load(std::memory_order_relaxed); }

void check_errors(Stream stream) {
#ifdef HOPATTN_WITH_CUDA
  kernels::check_device_status(stream);
#else
  (void)stream;
#endif
}

namespace debug {

bool enabled() { return debug_enabled(); }

TensorView HostCopies::of(const TensorView& t) {
  if (!t.defined() || !t.is_cuda() || t.numel() == 0) return t;
  // The element span the view reaches, whatever the signs of its strides (the validator has
  // checked that its offsets fit in int64).
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < t.rank(); ++i) {
    const int64_t reach = (t.size(i) - 1) * t.stride(i);
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t elem = dtype_size(t.dtype());
  const size_t bytes = static_cast<size_t>((hi - lo + 1) * elem);
  buffers_.push_back(std::make_unique<unsigned char[]>(bytes));
  unsigned char* copy = buffers_.back().get();
  const auto* first = static_cast<const unsigned char*>(t.data()) + lo * elem;
#ifdef HOPATTN_WITH_CUDA
  kernels::copy_to_host(copy, first, bytes, t.device().index, stream_, where_);
#else
  (void)first;
  (void)stream_;
  throw Error(ErrorKind::kNotImplemented,
              detail::concat(where_, ": expected CPU tensors (no GPU kernels), got CUDA tensors"));
#endif
  int64_t shape[TensorView::kMaxRank], strides[TensorView::kMaxRank];
  for (int i = 0; i < t.rank(); ++i) {
    shape[i] = t.size(i);
    strides[i] = t.stride(i);
  }
  return TensorView(copy - lo * elem, t.dtype(), t.rank(), shape, strides, t.device());
}

PageTable HostCopies::of(const PageTable& pages) {
  PageTable copy = pages;
  copy.block_table = of(pages.block_table);
  copy.indptr = of(pages.indptr);
  copy.indices = of(pages.indices);
  copy.kv_lens = of(pages.kv_lens);
  return copy;
}

KVScale HostCopies::of(const KVScale& scale) {
  KVScale copy = scale;
  copy.per_head = of(scale.per_head);
  return copy;
}

namespace {

FwdArgs host_values(HostCopies& h, const FwdArgs& a) {
  FwdArgs m = a;
  m.cu_seqlens_q = h.of(a.cu_seqlens_q);
  m.cu_seqlens_k = h.of(a.cu_seqlens_k);
  m.pages = h.of(a.pages);
  m.sinks = h.of(a.sinks);
  return m;
}

}  // namespace

void check_device_values(const FwdArgs& a, const AttentionOptions& o, Stream stream) {
  HostCopies h(stream, "hopattn.attention_fwd (debug mode)");
  validate::attention_fwd(host_values(h, a), o, validate::DeviceValues::kHostCopies);
}

void check_device_values(const BwdArgs& a, const AttentionOptions& o, Stream stream) {
  HostCopies h(stream, "hopattn.attention_bwd (debug mode)");
  BwdArgs m = a;
  m.fwd = host_values(h, a.fwd);
  validate::attention_bwd(m, o, validate::DeviceValues::kHostCopies);
}

// The values a paged serving call reads besides its index arrays: sinks and per-head scales.
template <class Args>
void copy_sinks_and_scales(HostCopies& h, const Args& a, Args& m) {
  m.sinks = h.of(a.sinks);
  m.k_scale = h.of(a.k_scale);
  m.v_scale = h.of(a.v_scale);
}

void check_device_values(const DecodeArgs& a, const DecodeOptions& o, Stream stream) {
  HostCopies h(stream, "hopattn.decode (debug mode)");
  DecodeArgs m = a;
  m.pages = h.of(a.pages);
  m.shared_kv_lens = h.of(a.shared_kv_lens);
  copy_sinks_and_scales(h, a, m);
  validate::decode(m, o, validate::DeviceValues::kHostCopies);
}

void check_device_values(const MlaArgs& a, const MlaOptions& o, Stream stream) {
  HostCopies h(stream, "hopattn.mla (debug mode)");
  MlaArgs m = a;
  m.cu_seqlens_q = h.of(a.cu_seqlens_q);
  m.pages = h.of(a.pages);
  validate::mla(m, o, validate::DeviceValues::kHostCopies);
}

void check_device_values(const BatchArgs& a, const BatchAttentionConfig& config,
                         const validate::BatchPlanned& planned, size_t workspace_bytes,
                         Stream stream) {
  HostCopies h(stream, "hopattn.BatchAttention.run (debug mode)");
  BatchArgs m = a;
  m.cu_seqlens_q = h.of(a.cu_seqlens_q);
  m.kv_lens = h.of(a.kv_lens);
  m.page_table = h.of(a.page_table);
  copy_sinks_and_scales(h, a, m);
  validate::batch_run(m, config, planned, workspace_bytes, validate::DeviceValues::kHostCopies);
}

}  // namespace debug
}  // namespace hopattn
